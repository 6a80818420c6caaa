"""The compiled scanner core (hlo_tools/_scan.pyx); everything else is in pyproject.toml.

Built by ``pip install`` when Cython (a build requirement) and a C compiler are there.
Without a compiler the extension is skipped (``optional``) and the parser runs its
pure-Python path, which is the same parser (``hlo_tools.scanner.COMPILED`` says which).
"""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # a build without Cython: the pure-Python path only
    ext_modules = []
else:
    ext_modules = cythonize(
        [Extension("hlo_tools._scan", ["hlo_tools/_scan.pyx"], optional=True)],
        quiet=True,
        compiler_directives={"language_level": 3},
    )

setup(ext_modules=ext_modules)
