"""HLO modules in Model Explorer (google-ai-edge/model-explorer), with per-node
overlays: measured time (from ``hlo profile``), predicted time, percent of
roofline, bytes.

An adapter extension, written as Model Explorer's extensions are: a package whose
``main`` module holds an ``Adapter`` subclass. Model Explorer imports it by name::

    model-explorer module.hlo --extensions=visualize.model_explorer \\
        --node_data_paths=OUT/measured_time.json,OUT/roofline_pct.json

``hlo profile FILE --model-explorer OUT`` writes those node-data files. Everything
but ``main`` is plain Python over the IR (``graphs``): Model Explorer is needed only
to show the graphs, and it is not imported until then.
"""
