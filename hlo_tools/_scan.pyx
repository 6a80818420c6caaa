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
VERSION = 1

from cpython.object cimport PyObject, PyTypeObject
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_Append, PyList_GET_SIZE, PyList_GET_ITEM
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


# -- character classes (ASCII) ---------------------------------------------------

cdef inline bint _is_space(unsigned char c) noexcept nogil:
    # Python's str.isspace() on ASCII, which is what the regexes' \s and str.strip() use
    return c == 32 or (9 <= c <= 13) or (28 <= c <= 31)

cdef inline bint _is_lower(unsigned char c) noexcept nogil:
    return 97 <= c <= 122

cdef inline bint _is_digit(unsigned char c) noexcept nogil:
    return 48 <= c <= 57

cdef inline bint _is_alpha_(unsigned char c) noexcept nogil:
    return (65 <= c <= 90) or (97 <= c <= 122) or c == 95

cdef inline bint _is_word(unsigned char c) noexcept nogil:
    return _is_alpha_(c) or _is_digit(c)

cdef inline bint _is_name_char(unsigned char c) noexcept nogil:  # [\w.\-]
    return _is_word(c) or c == 46 or c == 45


cdef inline Py_ssize_t _blanks(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """p past the spaces and tabs there (the regexes' ``[ \\t]*``)."""
    while p < end and (s[p] == 32 or s[p] == 9):
        p += 1
    return p


# -- the pieces of scanner._LINE ----------------------------------------------

cdef inline Py_ssize_t _string(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """``"(?:[^"\\\n]++|\\.)*+"`` at p (s[p] == '"'): its end, or -1."""
    cdef unsigned char c
    p += 1
    while p < end:
        c = s[p]
        if c == 34:
            return p + 1
        if c == 92:
            if p + 1 < end and s[p + 1] != 10:
                p += 2
                continue
            return -1
        if c == 10:
            return -1
        p += 1
    return -1


cdef Py_ssize_t _braced(const unsigned char* s, Py_ssize_t p, Py_ssize_t end, int depth) noexcept nogil:
    """``{...}`` nesting at most ``depth`` deep, strings inside (text.value_pattern)."""
    cdef unsigned char c
    cdef Py_ssize_t q
    p += 1
    while p < end:
        c = s[p]
        if c == 125:
            return p + 1
        if c == 34:
            q = _string(s, p, end)
            if q < 0:
                return -1
            p = q
        elif c == 123:
            if depth <= 1:
                return -1
            q = _braced(s, p, end, depth - 1)
            if q < 0:
                return -1
            p = q
        elif c == 10:
            return -1
        else:
            p += 1
    return -1


cdef inline Py_ssize_t _flat(const unsigned char* s, Py_ssize_t p, Py_ssize_t end, unsigned char close,
                             unsigned char other_open) noexcept nogil:
    """``[...]`` or ``(...)`` with nothing bracketed or quoted inside."""
    cdef unsigned char c
    p += 1
    while p < end:
        c = s[p]
        if c == close:
            return p + 1
        if c == other_open or c == 123 or c == 125 or c == 34 or c == 10:
            return -1
        p += 1
    return -1


cdef Py_ssize_t _value(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """``text.value_pattern(4)`` at p: the end of the value, or -1 when no item matches."""
    cdef Py_ssize_t start = p, q
    cdef unsigned char c
    while p < end:
        c = s[p]
        if c == 34:
            q = _string(s, p, end)
        elif c == 123:
            q = _braced(s, p, end, 4)
        elif c == 91:
            q = _flat(s, p, end, 93, 91)
        elif c == 40:
            q = _flat(s, p, end, 41, 40)
        elif c == 44 or c == 125 or c == 41 or c == 93 or _is_space(c):
            q = -1
        else:
            p += 1
            continue
        if q < 0:
            break
        p = q
    return p if p > start else -1


cdef Py_ssize_t _parens(const unsigned char* s, Py_ssize_t p, Py_ssize_t end, int max_depth) noexcept nogil:
    """``(...)`` balanced, at most ``max_depth`` deep, on one line (the tuple and
    buffer shapes of scanner._LINE)."""
    cdef int depth = 0
    cdef unsigned char c
    while p < end:
        c = s[p]
        if c == 40:
            depth += 1
            if depth > max_depth:
                return -1
        elif c == 41:
            depth -= 1
            if depth == 0:
                return p + 1
        elif c == 10:
            return -1
        p += 1
    return -1


cdef struct Fields:
    bint root
    Py_ssize_t name_s, name_e, shape_s, shape_e, op_s, op_e, ops_s, ops_e, tail_s, tail_e


cdef bint _match(const unsigned char* s, Py_ssize_t p, Py_ssize_t end, Fields* f) noexcept nogil:
    """scanner._LINE.fullmatch on s[p:end]."""
    cdef Py_ssize_t q
    cdef unsigned char c
    p = _blanks(s, p, end)
    f.root = False
    if end - p > 4 and memcmp(s + p, b"ROOT", 4) == 0 and (s[p + 4] == 32 or s[p + 4] == 9):
        q = p + 4
        q = _blanks(s, q, end)
        if q < end and s[q] != 61:  # `ROOT = ...` names an instruction ROOT
            f.root = True
            p = q
    if p < end and s[p] == 37:
        p += 1
    if p >= end or not _is_alpha_(s[p]):
        return False
    f.name_s = p
    p += 1
    while p < end and _is_name_char(s[p]):
        p += 1
    f.name_e = p
    p = _blanks(s, p, end)
    if p >= end or s[p] != 61:
        return False
    p += 1
    p = _blanks(s, p, end)
    f.shape_s = p
    if p >= end:
        return False
    c = s[p]
    if c == 40:
        p = _parens(s, p, end, 4)
    elif c == 98 and p + 1 < end and s[p + 1] == 40:
        p = _parens(s, p + 1, end, 2)
    elif _is_lower(c):
        p += 1
        while p < end and (_is_lower(s[p]) or _is_digit(s[p])):
            p += 1
        if p >= end or s[p] != 91:
            return False
        q = <Py_ssize_t>(<const unsigned char*>memchr(s + p, 93, end - p) - s) if memchr(s + p, 93, end - p) != NULL else -1
        if q < 0:
            return False
        p = q + 1
        if p < end and s[p] == 123:
            q = <Py_ssize_t>(<const unsigned char*>memchr(s + p, 125, end - p) - s) if memchr(s + p, 125, end - p) != NULL else -1
            if q < 0:
                return False
            p = q + 1
    else:
        return False
    if p < 0:
        return False
    f.shape_e = p
    if p >= end or not (s[p] == 32 or s[p] == 9):
        return False
    p = _blanks(s, p, end)
    if p >= end or not _is_lower(s[p]):
        return False
    f.op_s = p
    while p < end and (_is_lower(s[p]) or _is_digit(s[p]) or s[p] == 45):
        p += 1
    f.op_e = p
    if p >= end or s[p] != 40:
        return False
    p += 1
    f.ops_s = p
    while p < end and s[p] != 41:
        if s[p] == 40:
            return False
        p += 1
    if p >= end:
        return False
    f.ops_e = p
    p += 1
    f.tail_s = p
    # (?:, [A-Za-z_][\w\-]*=VALUE)*
    while p + 2 < end and s[p] == 44 and s[p + 1] == 32 and _is_alpha_(s[p + 2]):
        q = p + 3
        while q < end and (_is_word(s[q]) or s[q] == 45):
            q += 1
        if q >= end or s[q] != 61:
            break
        q = _value(s, q + 1, end)
        if q < 0:
            break
        p = q
    f.tail_e = p
    while p < end and (s[p] == 32 or s[p] == 9 or s[p] == 13):
        p += 1
    return p == end


# -- which raw tails stay raw (scanner.NEEDS_RESOLUTION and _repeats_a_key) ------

cdef bytes _KEYS = b""  # the keys, each followed by a NUL
cdef const char* _KEY_PTRS[32]
cdef Py_ssize_t _KEY_LENS[32]
cdef int _NKEYS = 0


def set_resolution_keys(keys):
    """The attribute keys the builder resolves at parse time (scanner.RESOLVED_KEYS):
    given once by the scanner, so the list is written in one place."""
    global _KEYS, _NKEYS
    if len(keys) > 32:
        raise ValueError("at most 32 keys")
    _KEYS = b"".join(k.encode("ascii") + b"\0" for k in keys)
    cdef const char* base = _KEYS
    cdef Py_ssize_t at = 0
    for i, k in enumerate(keys):
        _KEY_PTRS[i] = base + at
        _KEY_LENS[i] = len(k)
        at += len(k) + 1
    _NKEYS = len(keys)


cdef inline Py_ssize_t _tail_key(const unsigned char* s, Py_ssize_t p, Py_ssize_t end, Py_ssize_t* key_end) noexcept nogil:
    """The next ``, key=`` (scanner._TAIL_KEY) at or after p: the key's start (its end
    in key_end), or -1."""
    cdef Py_ssize_t q
    while p + 2 < end:
        if s[p] == 44 and s[p + 1] == 32 and _is_alpha_(s[p + 2]):
            q = p + 3
            while q < end and (_is_word(s[q]) or s[q] == 45):
                q += 1
            if q < end and s[q] == 61:
                key_end[0] = q
                return p + 2
        p += 1
    return -1


cdef bint _repeats_a_key(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """Two equal ``, key=`` keys in s[p:end] (scanner._TAIL_KEY's matches, strings
    included, as ``_repeats_a_key`` finds them)."""
    cdef Py_ssize_t a, a_end, b, b_end
    a = _tail_key(s, p, end, &a_end)
    while a >= 0:
        b = _tail_key(s, a_end + 1, end, &b_end)
        while b >= 0:
            if b_end - b == a_end - a and memcmp(s + a, s + b, a_end - a) == 0:
                return True
            b = _tail_key(s, b_end + 1, end, &b_end)
        a = _tail_key(s, a_end + 1, end, &a_end)
    return False


cdef bint _raw_tail(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """Whether the scanner keeps this tail raw: no ``,[ \\t]*KEY[ \\t]*=`` of a key the
    builder resolves (scanner.NEEDS_RESOLUTION) and, with two or more ``, `` in it,
    no repeated ``, key=`` (scanner._repeats_a_key); one pass over its commas."""
    cdef Py_ssize_t starts[32]
    cdef Py_ssize_t lens[32]
    cdef int nc = 0, comma_space = 0, i, j, k
    cdef Py_ssize_t q, r, n, start = p
    cdef const void* found
    while p < end:
        found = memchr(s + p, 44, end - p)
        if found == NULL:
            break
        p = <const unsigned char*>found - s
        q = p + 1
        q = _blanks(s, q, end)
        for k in range(_NKEYS):
            n = _KEY_LENS[k]
            if end - q > n and memcmp(s + q, _KEY_PTRS[k], n) == 0:
                r = q + n
                r = _blanks(s, r, end)
                if r < end and s[r] == 61:
                    return False
        if p + 1 < end and s[p + 1] == 32:
            comma_space += 1
            if p + 2 < end and _is_alpha_(s[p + 2]):
                r = p + 3
                while r < end and (_is_word(s[r]) or s[r] == 45):
                    r += 1
                if r < end and s[r] == 61:
                    if nc == 32:
                        nc = 33  # more than kept: the pairwise pass below
                    elif nc < 32:
                        starts[nc] = p + 2
                        lens[nc] = r - p - 2
                        nc += 1
        p += 1
    if comma_space < 2:
        return True
    if nc > 32:
        return not _repeats_a_key(s, start, end)
    for i in range(nc):
        for j in range(i):
            if lens[i] == lens[j] and memcmp(s + starts[i], s + starts[j], lens[i]) == 0:
                return False
    return True


cdef list _split_tail(str text, const unsigned char* s, Py_ssize_t p, Py_ssize_t end):
    """[(key, value, offset of key)] of a tail ``_match`` accepted (text.ATTRIBUTE's matches)."""
    cdef list out = []
    cdef Py_ssize_t k, q
    while p < end:
        k = p + 2
        q = k + 1
        while q < end and (_is_word(s[q]) or s[q] == 45):
            q += 1
        v = _value(s, q + 1, end)
        out.append((PyUnicode_Substring(text, k, q), PyUnicode_Substring(text, q + 1, v), k))
        p = v
    return out


cdef object _record(object record_type, str text, const unsigned char* s, Fields* f):
    """The InstrRecord the Python scanner makes of the same line."""
    cdef object attrs
    if f.tail_e == f.tail_s:
        attrs = []
    elif _raw_tail(s, f.tail_s, f.tail_e):
        attrs = PyUnicode_Substring(text, f.tail_s, f.tail_e)
    else:
        attrs = _split_tail(text, s, f.tail_s, f.tail_e)
    # a NamedTuple's instance is a tuple's layout: allocated as one, filled in place
    cdef object rec = PyType_GenericAlloc(<PyTypeObject*>record_type, 10)  # what tuple subclasses allocate with
    _put(rec, 0, f.name_s)
    _put(rec, 1, True if f.root else False)
    _put(rec, 2, PyUnicode_Substring(text, f.name_s, f.name_e))
    _put(rec, 3, PyUnicode_Substring(text, f.shape_s, f.shape_e))
    _put(rec, 4, f.shape_s)
    _put(rec, 5, PyUnicode_Substring(text, f.op_s, f.op_e))
    _put(rec, 6, f.op_s)
    _put(rec, 7, PyUnicode_Substring(text, f.ops_s, f.ops_e))
    _put(rec, 8, f.ops_s)
    _put(rec, 9, attrs)
    return rec


cdef inline void _put(object t, Py_ssize_t i, object v) noexcept:
    Py_INCREF(v)  # PyTuple_SET_ITEM takes the reference
    PyTuple_SET_ITEM(t, i, v)


def first_open_comment(str text):
    """Offset of the first ``/*`` that does not close on its line (strings not
    considered, as scanner._OPEN_COMMENT), or -1: what blank_multiline_comments asks."""
    if not PyUnicode_IS_COMPACT_ASCII(text):
        raise ValueError("the compiled scanner reads ASCII text only")
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), p = 0, q
    cdef const void* found
    while p + 1 < n:
        found = memchr(s + p, 47, n - p - 1)
        if found == NULL:
            return -1
        p = <const unsigned char*>found - s
        if s[p + 1] != 42:
            p += 1
            continue
        q = p + 2
        while q < n and s[q] != 10 and not (s[q] == 42 and q + 1 < n and s[q + 1] == 47):
            q += 1
        if q < n and s[q] == 10:
            return p
        if q >= n:
            return -1  # unterminated at the end of the text: no line break follows (the regex needs one)
        p = q + 2
    return -1


def match_line(str text, Py_ssize_t start, Py_ssize_t end):
    """``scanner._LINE.fullmatch(text, start, end)``'s groups and their starts, or None:
    (root, name, shape, opcode, operands, tail), (their offsets)."""
    if not PyUnicode_IS_COMPACT_ASCII(text):
        raise ValueError("the compiled scanner reads ASCII text only")
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_DATA(text)
    cdef Fields f
    if start < 0 or end > PyUnicode_GET_LENGTH(text) or start > end:
        raise IndexError("line outside the text")
    if not _match(s, start, end, &f):
        return None
    return ((f.root, text[f.name_s:f.name_e], text[f.shape_s:f.shape_e], text[f.op_s:f.op_e],
             text[f.ops_s:f.ops_e], text[f.tail_s:f.tail_e]),
            (f.name_s, f.shape_s, f.op_s, f.ops_s, f.tail_s))


def scan_body(str text, Py_ssize_t off, list out, object record_type):
    """Appends to ``out`` the records of the instruction lines from offset ``off`` on,
    while each line is one ``scanner._LINE`` matches; returns (lines read, offset of
    the first line not read).  Stops before the last line of the text (the Python
    loop ends the module there)."""
    if not PyUnicode_IS_COMPACT_ASCII(text):
        raise ValueError("the compiled scanner reads ASCII text only")
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef Py_ssize_t lines = 0, line_end
    cdef const void* nl
    cdef Fields f
    while off < n:
        nl = memchr(s + off, 10, n - off)
        if nl == NULL:
            break
        line_end = <const unsigned char*>nl - s
        if not _match(s, off, line_end, &f):
            break
        out.append(_record(record_type, text, s, &f))
        lines += 1
        off = line_end + 1
    return lines, off


# -- the builder's fast path ------------------------------------------------------

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    void Py_XDECREF(PyObject*)

#: Instruction's slots in the order Instruction._init_slots sets them; a slot
#: added there and not here turns the compiled path off (see _slot_offsets).
_SLOTS = ("_name", "_opcode", "_shape", "_operands", "_users", "_parent", "_attributes", "_raw_attributes",
          "_called", "_control_predecessors", "_control_successors", "async_wrapped_opcode", "parameter_number",
          "_literal", "_prev", "_next", "tuple_sugar")
cdef enum:
    NAME, OPCODE, SHAPE, OPERANDS, USERS, PARENT, ATTRIBUTES, RAW_ATTRIBUTES, CALLED, CONTROL_PREDECESSORS, \
    CONTROL_SUCCESSORS, ASYNC_WRAPPED_OPCODE, PARAMETER_NUMBER, LITERAL, PREV, NEXT, TUPLE_SUGAR, NSLOTS
cdef Py_ssize_t _OFF[NSLOTS]
cdef object _slots_of = None


def slot_offsets(cls):
    """Checks that ``cls`` (Instruction) has exactly the slots this module fills and
    returns their offsets; a ValueError otherwise (the scanner then keeps to Python)."""
    global _slots_of
    have = tuple(x for x in cls.__slots__ if x != "__weakref__")
    if sorted(have) != sorted(_SLOTS):
        raise ValueError(f"Instruction's slots changed: {sorted(set(have) ^ set(_SLOTS))}; update hlo_tools/_scan.pyx")
    for i, name in enumerate(_SLOTS):
        d = cls.__dict__[name]
        if type(d).__name__ != "member_descriptor":
            raise ValueError(f"Instruction.{name} is not a slot")
        _OFF[i] = (<PyMemberDescrObject*>d).d_member.offset
    _slots_of = cls
    return [_OFF[i] for i in range(NSLOTS)]


cdef inline void _set(object o, int slot, object v) noexcept:
    """The slot's store (what ``o.<slot> = v`` does, without the attribute lookup)."""
    cdef PyObject** at = <PyObject**>(<char*><PyObject*>o + _OFF[slot])
    cdef PyObject* old = at[0]
    Py_INCREF(v)
    at[0] = <PyObject*>v
    Py_XDECREF(old)


cdef inline object _get(object o, int slot):
    cdef PyObject* v = (<PyObject**>(<char*><PyObject*>o + _OFF[slot]))[0]
    return <object>v if v != NULL else None


cdef object _new = object.__new__


cdef inline bint _param_number(str t, Py_ssize_t* out) noexcept:
    """Builder's fast check: ASCII digits, fewer than 19 of them."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(t), i, v = 0
    cdef const unsigned char* s
    if n == 0 or n >= 19 or not PyUnicode_IS_COMPACT_ASCII(t):
        return False
    s = <const unsigned char*>PyUnicode_DATA(t)
    for i in range(n):
        if not _is_digit(s[i]):
            return False
        v = v * 10 + (s[i] - 48)
    out[0] = v
    return True


cdef object _operands(str text, Py_ssize_t a, Py_ssize_t m, dict names, object strip_comments):
    """``%a, %b`` in text[a:m] -> (instruction, ...), as the builder's fast path splits
    it (``/*index=N*/`` comments removed by ``strip_comments``, the builder's own
    regex); None when it is not that form or names an instruction not defined yet."""
    cdef Py_ssize_t b, i, j, n = 1, k = 0
    cdef const unsigned char* s
    cdef PyObject* p
    cdef tuple ops
    if m == a:
        return ()
    if not PyUnicode_IS_COMPACT_ASCII(text):
        return None
    s = <const unsigned char*>PyUnicode_DATA(text)
    if memchr(s + a, 91, m - a) != NULL:  # operands written with their shapes
        return None
    if memchr(s + a, 47, m - a) != NULL:
        cleaned = strip_comments(PyUnicode_Substring(text, a, m))
        if "/" in cleaned:
            return None
        return _operands(cleaned, 0, PyUnicode_GET_LENGTH(cleaned), names, None)
    for i in range(a, m):
        n += s[i] == 44
    ops = PyTuple_New(n)
    while a <= m:
        b = a
        while b < m and s[b] != 44:
            b += 1
        i, j = a, b
        while i < j and _is_space(s[i]):
            i += 1
        while j > i and _is_space(s[j - 1]):
            j -= 1
        while i < j and s[i] == 37:
            i += 1
        p = PyDict_GetItem(names, PyUnicode_Substring(text, i, j))
        if p == NULL:
            return None
        _put(ops, k, <object>p)
        k += 1
        a = b + 1
    return ops


cdef dict _attribute_dict(list attrs, frozenset computation_attrs):
    """A split tail's attributes as the builder's general path keeps them (called
    computations as None, resolved later); None for what only that path handles:
    a key given twice, a computation written inline, control predecessors."""
    cdef dict out = {}
    cdef tuple kv
    for kv in attrs:
        key = kv[0]
        if key in out or key == "control-predecessors":
            return None
        if key in computation_attrs:
            if "=" in <str>kv[1]:  # maybe `{ p = ... }`, a computation written inline
                return None
            out[key] = None
        else:
            out[key] = kv[1]
    return out


cdef object _make(object instruction, object comp, str name, object opcode, object shape, tuple operands, dict attrs,
                  object attrs_rec, object param_no, object literal, object tail, frozenset computation_attrs,
                  list pending_calls, dict comps, list resolved_calls):
    """A new Instruction linked after ``tail``: every slot Instruction._init_slots
    sets, as _from_parser (a raw tail) or __init__ (a split one) set them.  A call
    of a computation already in ``comps`` (``calls=%c``) is resolved here and noted
    in ``resolved_calls``; the others go to ``pending_calls`` (Builder.finish
    resolves them and looks for cycles)."""
    cdef PyObject* p
    cdef dict users, called
    cdef tuple kv
    cdef str value
    instr = _new(instruction)
    _set(instr, NAME, name)
    _set(instr, OPCODE, opcode)
    _set(instr, SHAPE, shape)
    _set(instr, OPERANDS, operands)
    _set(instr, USERS, {})
    _set(instr, PARENT, comp)
    if attrs is not None:
        _set(instr, ATTRIBUTES, attrs)
        _set(instr, RAW_ATTRIBUTES, None)
    elif attrs_rec:
        _set(instr, ATTRIBUTES, None)
        _set(instr, RAW_ATTRIBUTES, attrs_rec)
    else:
        _set(instr, ATTRIBUTES, {})
        _set(instr, RAW_ATTRIBUTES, None)
    called = {}
    _set(instr, CALLED, called)
    _set(instr, CONTROL_PREDECESSORS, ())
    _set(instr, CONTROL_SUCCESSORS, {})
    _set(instr, ASYNC_WRAPPED_OPCODE, None)
    _set(instr, PARAMETER_NUMBER, param_no)
    _set(instr, LITERAL, literal)
    _set(instr, PREV, tail)
    _set(instr, NEXT, None)
    _set(instr, TUPLE_SUGAR, False)
    for op in operands:
        users = <dict>_get(op, USERS)
        p = PyDict_GetItem(users, instr)
        users[instr] = 1 if p == NULL else <object>p + 1
    if attrs is not None:
        for kv in <list>attrs_rec:
            if kv[0] in computation_attrs:
                value = <str>kv[1]
                p = NULL
                if comps is not None and PyUnicode_GET_LENGTH(value) > 1 and value[0] == "%":
                    p = PyDict_GetItem(comps, value[1:])
                call = (instr, kv[0], value, <Py_ssize_t>kv[2] + len(<str>kv[0]) + 1)
                if p != NULL:
                    called[kv[0]] = (<object>p,)
                    resolved_calls.append(call)
                else:
                    pending_calls.append(call)
    return instr


cdef tuple _link(list records, Py_ssize_t k, object comp, dict names, dict shapes, object shape_of, dict opcodes,
                 object parameter, object constant, list numbers, object root, object literal_ok,
                 object instruction, frozenset computation_attrs, list pending_calls, object strip_comments):
    """link_fast's loop (see there): (index of the first record not linked, root)."""
    cdef Py_ssize_t n = PyList_GET_SIZE(records), pn
    cdef tuple r, kv
    cdef str name, operand_text
    cdef dict users, attrs
    cdef PyObject* p
    tail = comp._tail
    count = comp._count
    try:
        while k < n:
            r = <tuple>PyList_GET_ITEM(records, k)
            name = <str>PyTuple_GET_ITEM(r, 2)
            p = PyDict_GetItem(shapes, <object>PyTuple_GET_ITEM(r, 3))
            if p != NULL:
                shape = <object>p
            else:  # parsed and cached as the builder's general path does; None: that path says why
                shape = shape_of(<object>PyTuple_GET_ITEM(r, 3))
                if shape is None:
                    break
            p = PyDict_GetItem(opcodes, <object>PyTuple_GET_ITEM(r, 5))
            if p == NULL:
                break
            opcode = <object>p
            if PyDict_GetItem(names, name) != NULL:
                break
            attrs_rec = <object>PyTuple_GET_ITEM(r, 9)
            attrs = None
            if type(attrs_rec) is not str and attrs_rec:
                attrs = _attribute_dict(<list>attrs_rec, computation_attrs)
                if attrs is None:
                    break
            operand_text = <str>PyTuple_GET_ITEM(r, 7)
            operands = ()
            param_no = None
            literal = None
            if opcode is parameter:
                if not _param_number(operand_text, &pn):
                    break
                param_no = pn
            elif opcode is constant:
                literal = operand_text.strip()
                if not literal or not literal_ok(literal, shape):
                    break
            else:
                operands = _operands(operand_text, 0, PyUnicode_GET_LENGTH(operand_text), names, strip_comments)
                if operands is None:  # the Python builder reads it (or says what is wrong)
                    break
            is_root = <object>PyTuple_GET_ITEM(r, 1)
            if is_root and root is not None:
                break
            instr = _make(instruction, comp, name, opcode, shape, operands, attrs, attrs_rec, param_no, literal, tail,
                          computation_attrs, pending_calls, None, None)
            if param_no is not None:
                numbers.append(param_no)
            if is_root:
                root = instr
            # Computation._link, appending
            names[name] = instr
            count += 1
            if tail is None:
                comp._head = instr
            else:
                _set(tail, NEXT, instr)
            tail = instr
            k += 1
    finally:
        comp._tail = tail
        comp._count = count
    return k, root


def link_fast(list records, Py_ssize_t k, object comp, dict names, dict shapes, object shape_of, dict opcodes,
              object parameter, object constant, list numbers, object root, object literal_ok, object instruction,
              frozenset computation_attrs, list pending_calls, object strip_comments):
    """Builds and links ``records[k:]`` while each is the builder's fast case (shape
    cached or parsed by ``shape_of``, plain opcode, ``%a, %b`` operands, a new name,
    at most one ROOT; the attribute tail raw, or split with called computations to
    resolve later); returns (index of the first record left to the Python builder,
    root so far).  Exactly ``Builder._computation``'s paths for those records, slot
    for slot ``Instruction._init_slots`` and ``Computation._link`` (tested on the corpus)."""
    if instruction is not _slots_of:
        slot_offsets(instruction)
    return _link(records, k, comp, names, shapes, shape_of, opcodes, parameter, constant, numbers, root, literal_ok,
                 instruction, computation_attrs, pending_calls, strip_comments)


# -- whole computations ---------------------------------------------------------------

from libc.stdlib cimport malloc, calloc, realloc, free


cdef class SpanMap:
    """Text -> object, looked up by a span of the module text without making a str
    (shapes and opcodes repeat on every line).  Holds what it maps; cleared when full."""
    cdef Py_ssize_t cap, used, limit
    cdef uint64_t* hashes
    cdef const unsigned char** keys
    cdef Py_ssize_t* lens
    cdef PyObject** values
    cdef list kept

    def __cinit__(self, Py_ssize_t limit=200_000):
        self.limit = limit
        self._alloc(1024)

    cdef void _alloc(self, Py_ssize_t cap) except *:
        self.cap, self.used, self.kept = cap, 0, []
        self.hashes = <uint64_t*>calloc(cap, sizeof(uint64_t))
        self.keys = <const unsigned char**>calloc(cap, sizeof(void*))
        self.lens = <Py_ssize_t*>calloc(cap, sizeof(Py_ssize_t))
        self.values = <PyObject**>calloc(cap, sizeof(void*))
        if not (self.hashes and self.keys and self.lens and self.values):
            raise MemoryError()

    cdef void _release(self) noexcept:
        free(self.hashes)
        free(self.keys)
        free(self.lens)
        free(self.values)

    def __dealloc__(self):
        self._release()

    cdef PyObject* get(self, const unsigned char* p, Py_ssize_t n, uint64_t h) noexcept:
        cdef Py_ssize_t i = h & (self.cap - 1)
        while self.keys[i] != NULL:
            if self.hashes[i] == h and self.lens[i] == n and memcmp(self.keys[i], p, n) == 0:
                return self.values[i]
            i = (i + 1) & (self.cap - 1)
        return NULL

    cdef void put(self, str key, object value, uint64_t h) except *:
        cdef Py_ssize_t i, j, old_cap
        cdef uint64_t* hashes
        cdef const unsigned char** keys
        cdef Py_ssize_t* lens
        cdef PyObject** values
        if self.used >= self.limit:  # a process that reads many unrelated modules: start over
            self._release()
            self._alloc(1024)
        if 2 * (self.used + 1) > self.cap:
            hashes, keys, lens, values, old_cap, kept = self.hashes, self.keys, self.lens, self.values, self.cap, self.kept
            self._alloc(2 * old_cap)
            self.kept, self.used = kept, 0
            for j in range(old_cap):
                if keys[j] != NULL:
                    i = hashes[j] & (self.cap - 1)
                    while self.keys[i] != NULL:
                        i = (i + 1) & (self.cap - 1)
                    self.hashes[i], self.keys[i], self.lens[i], self.values[i] = hashes[j], keys[j], lens[j], values[j]
                    self.used += 1
            free(hashes)
            free(keys)
            free(lens)
            free(values)
        self.kept.append(key)
        self.kept.append(value)
        i = h & (self.cap - 1)
        while self.keys[i] != NULL:
            i = (i + 1) & (self.cap - 1)
        self.hashes[i] = h
        self.keys[i] = <const unsigned char*>PyUnicode_DATA(key)
        self.lens[i] = PyUnicode_GET_LENGTH(key)
        self.values[i] = <PyObject*>value
        self.used += 1


cdef inline uint64_t _hash(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = <uint64_t>14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * <uint64_t>1099511628211ULL
    return h


cdef SpanMap _SHAPE_MAP = SpanMap()
cdef SpanMap _OPCODE_MAP = SpanMap()
cdef set _LITERALS_OK = set()  # (literal, shape text) pairs the builder's check accepted


cdef bint _closed_block_comments_only(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """Every ``/`` on the line is in a ``/* */`` that closes on it, none in a string
    (scanner.uncomment_line leaves such a line as it is)."""
    cdef const void* found
    cdef Py_ssize_t q
    while p < end:
        if s[p] == 34:
            return False  # strings on a header line: let the Python loop decide
        if s[p] == 47:
            if p + 1 >= end or s[p + 1] != 42:
                return False
            q = p + 2
            while q + 1 < end and not (s[q] == 42 and s[q + 1] == 47):
                q += 1
            if q + 1 >= end:
                return False
            p = q + 2
            continue
        p += 1
    return True


cdef inline bint _blank(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    while p < end:
        if not _is_space(s[p]):
            return False
        p += 1
    return True


cdef inline bint _closing_brace(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """A line that is ``}`` alone (scanner._COMP_END without attributes), \\r allowed."""
    if end > p and s[end - 1] == 13:
        end -= 1
    p = _blanks(s, p, end)
    if p >= end or s[p] != 125:
        return False
    p += 1
    p = _blanks(s, p, end)
    return p == end


cdef struct Header:
    bint entry
    Py_ssize_t name_s, name_e, sig_s, sig_e  # sig_s < 0: no signature


cdef bint _header(const unsigned char* s, Py_ssize_t p, Py_ssize_t end, Header* h) noexcept nogil:
    """A header exactly as XLA prints it, ``[ENTRY ]%name (p: f32[]) -> f32[] {``, with
    what scanner.computation_header reads from it; False for anything else (that
    function then reads the line)."""
    cdef Py_ssize_t q
    h.entry = False
    h.sig_s = h.sig_e = -1
    if end - p > 6 and memcmp(s + p, b"ENTRY ", 6) == 0 and (s[p + 6] == 37 or _is_alpha_(s[p + 6])):
        h.entry = True
        p += 6
    if p < end and s[p] == 37:
        p += 1
    if p >= end or not _is_alpha_(s[p]):
        return False
    h.name_s = p
    while p < end and _is_name_char(s[p]):
        p += 1
    h.name_e = p
    if end - p >= 2 and s[end - 2] == 32 and s[end - 1] == 123:
        if end - p == 2:
            h.sig_s = -1
            return True
    else:
        return False
    if s[p] != 32 or p + 1 >= end or s[p + 1] != 40:
        return False
    h.sig_s = p + 1
    h.sig_e = end - 2
    while h.sig_e > h.sig_s and (s[h.sig_e - 1] == 32 or s[h.sig_e - 1] == 9):
        h.sig_e -= 1
    # the regex's `\(.*\)[ \t]*->`: some `)` followed by `->` must be in it
    q = h.sig_s
    while q < h.sig_e:
        if s[q] == 41:
            p = q + 1
            while p < h.sig_e and (s[p] == 32 or s[p] == 9):
                p += 1
            if h.sig_e - p >= 2 and s[p] == 45 and s[p + 1] == 62:
                return True
        q += 1
    return False


cdef inline Py_ssize_t _eat(const unsigned char* s, Py_ssize_t p, Py_ssize_t end, const unsigned char* t,
                            Py_ssize_t n) noexcept nogil:
    """p past ``t`` if s[p:] starts with it, else -1."""
    if p < 0 or end - p < n or memcmp(s + p, t, n) != 0:
        return -1
    return p + n


cdef Py_ssize_t _eat_shape(const unsigned char* s, Py_ssize_t p, Py_ssize_t end, const unsigned char* shape,
                           Py_ssize_t n) noexcept nogil:
    """p past ``shape`` without its layouts (what a signature prints), else -1."""
    cdef Py_ssize_t i = 0
    while i < n:
        if shape[i] == 123:
            while i < n and shape[i] != 125:
                i += 1
            i += 1
            continue
        if p < 0 or p >= end or s[p] != shape[i]:
            return -1
        p += 1
        i += 1
    return p


cdef inline Py_ssize_t _index_comment(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """p past a ``/*index=N*/`` XLA prints before every fifth parameter, if one is there."""
    cdef Py_ssize_t q = _eat(s, p, end, <const unsigned char*>b"/*index=", 8)
    if q < 0 or q >= end or not _is_digit(s[q]):
        return p
    while q < end and _is_digit(s[q]):
        q += 1
    q = _eat(s, q, end, <const unsigned char*>b"*/", 2)
    return q if q >= 0 else p


cdef bint _signature_is(const unsigned char* s, Header* h, Fields* lines, Py_ssize_t n, Py_ssize_t root,
                        Py_ssize_t* params, Py_ssize_t nparams) noexcept nogil:
    """The header's signature is exactly printer.signature_text of what was built:
    ``(name: shape, ...) -> root shape``, shapes without layouts, parameters in
    number order (``params``: their lines, by number)."""
    cdef Py_ssize_t p = h.sig_s, i
    cdef Fields* f
    p = _eat(s, p, h.sig_e, <const unsigned char*>b"(", 1)
    for i in range(nparams):
        f = &lines[params[i]]
        if i:
            p = _eat(s, p, h.sig_e, <const unsigned char*>b", ", 2)
            p = _index_comment(s, p, h.sig_e)
        p = _eat(s, p, h.sig_e, s + f.name_s, f.name_e - f.name_s)
        p = _eat(s, p, h.sig_e, <const unsigned char*>b": ", 2)
        p = _eat_shape(s, p, h.sig_e, s + f.shape_s, f.shape_e - f.shape_s)
    p = _eat(s, p, h.sig_e, <const unsigned char*>b") -> ", 5)
    f = &lines[root]
    p = _eat_shape(s, p, h.sig_e, s + f.shape_s, f.shape_e - f.shape_s)
    return p == h.sig_e


cdef Fields* _lines = NULL  # one computation's instruction lines, reused
cdef Py_ssize_t _lines_cap = 0
cdef Py_ssize_t* _params = NULL
cdef Py_ssize_t _params_cap = 0


cdef object _lookup(SpanMap table, str text, const unsigned char* s, Py_ssize_t a, Py_ssize_t b, object miss):
    """table[text[a:b]], filled by ``miss(str)`` (None: not cached, the caller stops)."""
    cdef uint64_t h = _hash(s + a, b - a)
    cdef PyObject* v = table.get(s + a, b - a, h)
    if v != NULL:
        return <object>v
    key = PyUnicode_Substring(text, a, b)
    value = miss(key)
    if value is not None:
        table.put(key, value, h)
    return value


cdef object _built(str text, const unsigned char* s, Fields* lines, Py_ssize_t n, object comp, dict names,
                   object shape_of, dict opcodes, object parameter, object constant, object literal_ok,
                   object instruction, frozenset computation_attrs, list pending_calls, object strip_comments,
                   dict comps, list resolved_calls, Py_ssize_t* root_line):
    """Builds a computation's lines into ``comp`` as ``_link`` does their records;
    returns the root, or None where the Python builder must read the computation."""
    cdef Py_ssize_t i, a, b, pn, i0, j0
    cdef Fields* f
    cdef PyObject* p
    cdef dict attrs
    cdef list ops
    tail = None
    root = None
    root_line[0] = -1
    for i in range(n):
        f = &lines[i]
        name = PyUnicode_Substring(text, f.name_s, f.name_e)
        if PyDict_GetItem(names, name) != NULL:
            return None
        shape = _lookup(_SHAPE_MAP, text, s, f.shape_s, f.shape_e, shape_of)
        if shape is None:
            return None
        opcode = _lookup(_OPCODE_MAP, text, s, f.op_s, f.op_e, opcodes.get)
        if opcode is None:
            return None
        attrs = None
        attrs_rec = None
        if f.tail_e > f.tail_s:
            if _raw_tail(s, f.tail_s, f.tail_e):
                attrs_rec = PyUnicode_Substring(text, f.tail_s, f.tail_e)
            else:
                attrs_rec = _split_tail(text, s, f.tail_s, f.tail_e)
                attrs = _attribute_dict(<list>attrs_rec, computation_attrs)
                if attrs is None:
                    return None
        operands = ()
        param_no = None
        literal = None
        if opcode is parameter:
            if f.ops_e - f.ops_s == 0 or f.ops_e - f.ops_s >= 19:
                return None
            pn = 0
            for a in range(f.ops_s, f.ops_e):
                if not _is_digit(s[a]):
                    return None
                pn = pn * 10 + (s[a] - 48)
            param_no = pn
        elif opcode is constant:
            a, b = f.ops_s, f.ops_e
            while a < b and _is_space(s[a]):
                a += 1
            while b > a and _is_space(s[b - 1]):
                b -= 1
            if a == b:
                return None
            literal = PyUnicode_Substring(text, a, b)
            key = (literal, PyUnicode_Substring(text, f.shape_s, f.shape_e))
            if key not in _LITERALS_OK:
                if not literal_ok(literal, shape):
                    return None
                if len(_LITERALS_OK) > 100_000:
                    _LITERALS_OK.clear()
                _LITERALS_OK.add(key)
        else:
            operands = _operands(text, f.ops_s, f.ops_e, names, strip_comments)
            if operands is None:
                return None
        if f.root:
            if root is not None:
                return None
        instr = _make(instruction, comp, name, opcode, shape, operands, attrs, attrs_rec, param_no, literal, tail,
                      computation_attrs, pending_calls, comps, resolved_calls)
        if f.root:
            root = instr
            root_line[0] = i
        names[name] = instr
        if tail is None:
            comp._head = instr
        else:
            _set(tail, NEXT, instr)
        tail = instr
    comp._tail = tail
    comp._count = n
    if root is None:
        root = tail
        root_line[0] = n - 1
    return root


def build_computations(str text, Py_ssize_t off, object rec, object builder, object computation_header,
                       object record_type, object computation, tuple link_args):
    """Scans and builds whole computations from offset ``off`` while each is in the
    form XLA prints (a one-line header, instruction lines ``_LINE`` matches, ``}``
    alone; blank lines around) and every line takes the builder's fast path; the
    first computation that is not is left whole to the Python scanner and builder
    (nothing of it kept).  Does what ``Builder.add`` does for each: same checks,
    same Computation.  Returns (lines read, computations built, offset)."""
    global _lines, _lines_cap, _params, _params_cap
    if not PyUnicode_IS_COMPACT_ASCII(text):
        raise ValueError("the compiled scanner reads ASCII text only")
    (shapes, shape_of, opcodes, parameter, constant, literal_ok, instruction, computation_attrs, strip_comments) = link_args
    if instruction is not _slots_of:
        slot_offsets(instruction)
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef Py_ssize_t lines = 0, built = 0, nl, p, body_lines, line_end, count, i, root_line, nparams, pn
    cdef bint ok
    cdef const void* found
    cdef Header h
    cdef bint closed
    cdef list pending_calls = None, resolved_calls = None, module_comps = None
    cdef dict comps = None
    while off < n:
        found = memchr(s + off, 10, n - off)
        if found == NULL:
            break  # the last line: the Python loop ends the module there
        nl = <const unsigned char*>found - s
        if _blank(s, off, nl):
            lines += 1
            off = nl + 1
            continue
        line_end = nl - 1 if nl > off and s[nl - 1] == 13 else nl
        if memchr(s + off, 47, line_end - off) != NULL and not _closed_block_comments_only(s, off, line_end):
            break  # `//` comments: the Python loop blanks them
        if not _header(s, off, line_end, &h):
            crec = computation_header(PyUnicode_Substring(text, off, line_end), off)
            if crec is None:
                break
            h.entry = crec.is_entry
            h.name_s = crec.pos
            h.name_e = crec.pos + len(crec.name)
            if crec.signature is None:
                h.sig_s = -1
            else:
                h.sig_s = crec.signature_pos
                h.sig_e = crec.signature_pos + len(crec.signature)
        # the body: instruction lines, blank lines, then `}` alone
        count = 0
        p = nl + 1
        body_lines = 0
        closed = False
        while p < n:
            found = memchr(s + p, 10, n - p)
            if found == NULL:
                break
            nl = <const unsigned char*>found - s
            body_lines += 1
            if count == _lines_cap:
                _lines_cap = 2 * _lines_cap + 64
                _lines = <Fields*>realloc(_lines, _lines_cap * sizeof(Fields))
                if _lines == NULL:
                    _lines_cap = 0
                    raise MemoryError()
            if _match(s, p, nl, &_lines[count]):
                count += 1
            elif _closing_brace(s, p, nl):
                closed = True
                p = nl + 1
                break
            elif not _blank(s, p, nl):
                break
            p = nl + 1
        if not closed or count == 0:
            break
        name = PyUnicode_Substring(text, h.name_s, h.name_e)
        if comps is None and hasattr(builder, "module"):
            comps, module_comps, pending_calls, resolved_calls = (builder.comps, builder.module.computations,
                                                                  builder.pending_calls, builder.resolved_calls)
        if name == "ENTRY" or (comps is not None and name in comps) or (h.entry and comps is not None and builder.entry_name is not None):
            break  # the Python builder reports it
        if comps is None:
            builder._start(rec)
            comps, module_comps, pending_calls, resolved_calls = (builder.comps, builder.module.computations,
                                                                  builder.pending_calls, builder.resolved_calls)
        comp = computation(name, is_entry=h.entry)
        mark, mark_resolved = len(pending_calls), len(resolved_calls)
        root = _built(text, s, _lines, count, comp, comp._names, shape_of, opcodes, parameter, constant, literal_ok,
                      instruction, computation_attrs, pending_calls, strip_comments, comps, resolved_calls, &root_line)
        if root is None:
            del pending_calls[mark:], resolved_calls[mark_resolved:]
            break  # built again, in full, by the Python builder
        comp._root = root
        # parameters numbered 0..n-1, each once (else the Python builder says where)
        nparams = 0
        for i in range(count):
            if _is_parameter(s, &_lines[i]):
                nparams += 1
        if nparams > _params_cap:
            _params_cap = 2 * nparams
            _params = <Py_ssize_t*>realloc(_params, _params_cap * sizeof(Py_ssize_t))
            if _params == NULL:
                _params_cap = 0
                raise MemoryError()
        for i in range(nparams):
            _params[i] = -1
        ok = True
        for i in range(count):
            if _is_parameter(s, &_lines[i]):
                pn = _digits(s, _lines[i].ops_s, _lines[i].ops_e)
                if pn >= nparams or _params[pn] >= 0:
                    ok = False
                    break
                _params[pn] = i
        if not ok:
            del pending_calls[mark:], resolved_calls[mark_resolved:]
            break
        if h.sig_s >= 0 and not _signature_is(s, &h, _lines, count, root_line, _params, nparams):
            builder._check_signature(computation_header(PyUnicode_Substring(text, off, line_end), off), comp)
        comps[name] = comp
        comp.parent = builder.module
        module_comps.append(comp)
        if h.entry:
            builder.entry_name = name
        built += 1
        lines += 1 + body_lines
        off = p
    return lines, built, off


cdef inline Py_ssize_t _digits(const unsigned char* s, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    cdef Py_ssize_t v = 0
    while a < b:
        v = v * 10 + (s[a] - 48)
        a += 1
    return v


cdef inline bint _is_parameter(const unsigned char* s, Fields* f) noexcept nogil:
    return f.op_e - f.op_s == 9 and memcmp(s + f.op_s, b"parameter", 9) == 0
