"""``hlo reduce``: shrink a module while a predicate still holds (XLA aborts with
the same message, outputs still differ, a pass still fires, a shell command
exits 0), keeping every candidate a valid module.

- ``ddmin``: delta debugging over any list of parts, with a test budget;
- ``subgraph``: the candidates (the subgraph some instructions induce);
- ``predicates``: what a reduction keeps true;
- ``reducer``: ``reduce_module(module, predicate) -> Reduction``;

In a notebook::

    from hlo_lab.debug.reduce.predicates import aborts_like
    from hlo_lab.debug.reduce.reducer import reduce_module
    small = reduce_module(module, aborts_like(module)).module
"""
