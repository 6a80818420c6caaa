"""The compiled scanner core (hlo_tools/_scan.pyx); everything else is in pyproject.toml.

Built by ``pip install`` when Cython (a build requirement) and a C compiler are there.
Without a working compiler the build says so in one line and the package installs
with the parser's pure-Python path, the same parser (``hlo_tools.scanner.PARSER_PATH``
says which one runs; ``HLO_PARSER=python`` chooses the pure-Python one).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Builds the core if it can; any compiler failure leaves the pure-Python path."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler, a broken one, missing headers: all the same to the user
            print(f"warning: hlo_tools._scan not built ({type(e).__name__}: {str(e)[:200]}); the parser runs its pure-Python path")

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:
            print(f"warning: {ext.name} not built ({type(e).__name__}: {str(e)[:200]}); the parser runs its pure-Python path")

    def get_outputs(self) -> list[str]:  # only what was built (an editable install copies these)
        import os

        return [p for p in super().get_outputs() if os.path.exists(p)]


try:
    from Cython.Build import cythonize
except ImportError:  # a build without Cython: the pure-Python path only
    ext_modules = []
else:
    ext_modules = cythonize([Extension("hlo_tools._scan", ["hlo_tools/_scan.pyx"], optional=True)], quiet=True,
                            compiler_directives={"language_level": 3})

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
