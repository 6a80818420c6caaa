"""``hlo tune``: a search over one module's fusion decisions against measured
time (``search.Tuner``); its space (``space``), its worker side (``measure``)
and its rows in the results database (``store``)."""
