# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled core of the parser's fast path (built from this file by the package's
own build when a C compiler is there; ``hlo_tools.scanner`` falls back to its pure
Python path otherwise, and ``HLO_PARSER=python`` chooses that path).

Two loops, each the exact counterpart of a Python loop that stays the specification
and is tested against it on the corpus and XLA's test tree:

* ``scan_body``: the instruction lines of a computation body as ``scanner._LINE``
  reads them, as the same ``InstrRecord``s (``match_line`` is the single-line form,
  compared group by group with the regex);
* ``link_fast``: the builder's fast path (``Builder._computation``), the common
  canonical line turned into an ``Instruction`` linked into its computation.

Both stop at the first line or record they do not fully understand and hand it to
the Python code, which reports errors with their positions.  Text must be ASCII
(``str.isascii()``: one byte per character, so offsets are character offsets).
"""

#: The interface version scanner.py expects; a stale build (an older .so beside a
#: newer checkout) is not used.
VERSION = 2

from cpython.object cimport PyObject, PyTypeObject
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_SIZE, PyList_GET_ITEM
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_ITEM
from cpython.ref cimport Py_INCREF
from libc.string cimport memchr, memcmp
from libc.stdint cimport uint64_t

cdef extern from "Python.h":
    const char* PyUnicode_DATA(object o)
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    object PyUnicode_Substring(object s, Py_ssize_t start, Py_ssize_t end)
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)


include "_scan_line.pxi"
include "_scan_instr.pxi"
include "_scan_computations.pxi"
