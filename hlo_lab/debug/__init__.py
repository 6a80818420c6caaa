"""Finding what broke and handing it upstream: ``bisect`` (the first pass, then the
first decision inside it, that makes a module fail), ``divergence`` (the first
instruction whose value differs between two modules), ``reduce`` (delta debugging
a module while a predicate holds) and ``upstream`` (a bundle a reviewer can read).

Their subcommands are ``hlo_lab.cli.{bisect,divergence,reduce,upstream}``.
"""
