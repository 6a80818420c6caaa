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
    while p < end and (s[p] == 32 or s[p] == 9):
        p += 1
    f.root = False
    if end - p > 4 and memcmp(s + p, b"ROOT", 4) == 0 and (s[p + 4] == 32 or s[p + 4] == 9):
        q = p + 4
        while q < end and (s[q] == 32 or s[q] == 9):
            q += 1
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
    while p < end and (s[p] == 32 or s[p] == 9):
        p += 1
    if p >= end or s[p] != 61:
        return False
    p += 1
    while p < end and (s[p] == 32 or s[p] == 9):
        p += 1
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
    while p < end and (s[p] == 32 or s[p] == 9):
        p += 1
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


cdef bint _needs_resolution(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """``,[ \\t]*(?:KEY)[ \\t]*=`` anywhere in s[p:end] (strings included, as the regex)."""
    cdef Py_ssize_t q, r, n
    cdef int i
    while p < end:
        if s[p] == 44:
            q = p + 1
            while q < end and (s[q] == 32 or s[q] == 9):
                q += 1
            for i in range(_NKEYS):
                n = _KEY_LENS[i]
                if end - q > n and memcmp(s + q, _KEY_PTRS[i], n) == 0:
                    r = q + n
                    while r < end and (s[r] == 32 or s[r] == 9):
                        r += 1
                    if r < end and s[r] == 61:
                        return True
        p += 1
    return False


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


cdef inline int _count_comma_space(const unsigned char* s, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    cdef int n = 0
    while p + 1 < end:
        if s[p] == 44 and s[p + 1] == 32:
            n += 1
            if n >= 2:
                return n
            p += 2
        else:
            p += 1
    return n


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
    elif not _needs_resolution(s, f.tail_s, f.tail_e) and (
            _count_comma_space(s, f.tail_s, f.tail_e) < 2 or not _repeats_a_key(s, f.tail_s, f.tail_e)):
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


cdef inline void _put(object t, Py_ssize_t i, object v):
    Py_INCREF(v)  # PyTuple_SET_ITEM takes the reference
    PyTuple_SET_ITEM(t, i, v)


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


cdef inline void _set(object o, int slot, object v):
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


cdef inline bint _param_number(str t, Py_ssize_t* out):
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


cdef object _operands(str text, dict names):
    """``%a, %b`` -> (instruction, ...), as the builder's fast path splits it; None
    when it is not that form or names an instruction not defined yet."""
    cdef Py_ssize_t m = PyUnicode_GET_LENGTH(text), a = 0, b, i, j
    cdef const unsigned char* s
    cdef PyObject* p
    if m == 0:
        return ()
    if not PyUnicode_IS_COMPACT_ASCII(text):
        return None
    s = <const unsigned char*>PyUnicode_DATA(text)
    if memchr(s, 91, m) != NULL or memchr(s, 47, m) != NULL:  # shapes or /*index*/ comments
        return None
    cdef list ops = []
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
        ops.append(<object>p)
        a = b + 1
    return tuple(ops)


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


cdef tuple _link(list records, Py_ssize_t k, object comp, dict names, dict shapes, object shape_of, dict opcodes,
                 object parameter, object constant, list numbers, object root, object literal_ok,
                 object instruction, frozenset computation_attrs, list pending_calls):
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
                operands = _operands(operand_text, names)
                if operands is None:  # the Python builder reads it (or says what is wrong)
                    break
            is_root = <object>PyTuple_GET_ITEM(r, 1)
            if is_root and root is not None:
                break
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
            _set(instr, CALLED, {})
            _set(instr, CONTROL_PREDECESSORS, ())
            _set(instr, CONTROL_SUCCESSORS, {})
            _set(instr, ASYNC_WRAPPED_OPCODE, None)
            _set(instr, PARAMETER_NUMBER, param_no)
            _set(instr, LITERAL, literal)
            _set(instr, PREV, tail)
            _set(instr, NEXT, None)
            _set(instr, TUPLE_SUGAR, False)
            for op in <tuple>operands:
                users = <dict>_get(op, USERS)
                p = PyDict_GetItem(users, instr)
                users[instr] = 1 if p == NULL else <object>p + 1
            if attrs is not None:
                for kv in <list>attrs_rec:
                    if kv[0] in computation_attrs:
                        pending_calls.append((instr, kv[0], kv[1], <Py_ssize_t>kv[2] + len(<str>kv[0]) + 1))
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
              frozenset computation_attrs, list pending_calls):
    """Builds and links ``records[k:]`` while each is the builder's fast case (shape
    cached or parsed by ``shape_of``, plain opcode, ``%a, %b`` operands, a new name,
    at most one ROOT; the attribute tail raw, or split with called computations to
    resolve later); returns (index of the first record left to the Python builder,
    root so far).  Exactly ``Builder._computation``'s paths for those records, slot
    for slot ``Instruction._init_slots`` and ``Computation._link`` (tested on the corpus)."""
    if instruction is not _slots_of:
        slot_offsets(instruction)
    return _link(records, k, comp, names, shapes, shape_of, opcodes, parameter, constant, numbers, root, literal_ok,
                 instruction, computation_attrs, pending_calls)


# -- whole computations ---------------------------------------------------------------

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
    while p < end and (s[p] == 32 or s[p] == 9):
        p += 1
    if p >= end or s[p] != 125:
        return False
    p += 1
    while p < end and (s[p] == 32 or s[p] == 9):
        p += 1
    return p == end


cdef str _without_layouts(str shape_text):
    """``(f32[2]{0}, s32[])`` -> ``(f32[2], s32[])``: a written shape as a
    computation signature prints it, if the shape was written as XLA prints it."""
    if "{" not in shape_text:
        return shape_text
    cdef list parts = []
    cdef Py_ssize_t i = 0, j
    while True:
        j = shape_text.find("{", i)
        if j < 0:
            parts.append(shape_text[i:])
            return "".join(parts)
        parts.append(shape_text[i:j])
        i = shape_text.find("}", j)
        if i < 0:
            return shape_text
        i += 1


cdef object _signature(list records, object root_record, object parameter, dict opcodes, list numbers):
    """The signature the builder checks a header against (printer.signature_text),
    from the records, parameters in text order; None unless they are numbered
    0, 1, ... in that order."""
    cdef list params = []
    cdef tuple r
    cdef Py_ssize_t expect = 0
    for item in records:
        r = <tuple>item
        if PyDict_GetItem(opcodes, <object>PyTuple_GET_ITEM(r, 5)) == <PyObject*>parameter:
            if numbers[expect] != expect:
                return None
            params.append(f"{r[2]}: {_without_layouts(r[3])}")
            expect += 1
    return f"({', '.join(params)}) -> {_without_layouts((<tuple>root_record)[3])}"


def build_computations(str text, Py_ssize_t off, object rec, object builder, object computation_header,
                       object record_type, object computation, tuple link_args):
    """Scans and builds whole computations from offset ``off`` while each is in the
    form XLA prints (a one-line header, instruction lines ``_LINE`` matches, ``}``
    alone; blank lines around) and every record takes the builder's fast path;
    the first computation that is not is left whole to the Python scanner and
    builder (nothing of it kept).  Does what ``Builder.add`` does for each: same
    checks, same Computation.  Returns (lines read, computations built, offset)."""
    if not PyUnicode_IS_COMPACT_ASCII(text):
        raise ValueError("the compiled scanner reads ASCII text only")
    (shapes, shape_of, opcodes, parameter, constant, literal_ok, instruction, computation_attrs) = link_args
    if instruction is not _slots_of:
        slot_offsets(instruction)
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef Py_ssize_t lines = 0, built = 0, nl, p, body_lines, line_end, k, i
    cdef const void* found
    cdef Fields f
    cdef list records, numbers, pending_calls
    cdef dict comps
    cdef bint closed
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
        if memchr(s + off, 47, line_end - off) != NULL:  # comments: the Python loop
            break
        crec = computation_header(PyUnicode_Substring(text, off, line_end), off)
        if crec is None:
            break
        # the body: instruction lines, blank lines, then `}` alone
        records = []
        root_index = -1
        p = nl + 1
        body_lines = 0
        closed = False
        while p < n:
            found = memchr(s + p, 10, n - p)
            if found == NULL:
                break
            nl = <const unsigned char*>found - s
            body_lines += 1
            if _match(s, p, nl, &f):
                if f.root:
                    root_index = PyList_GET_SIZE(records)
                records.append(_record(record_type, text, s, &f))
            elif _closing_brace(s, p, nl):
                closed = True
                p = nl + 1
                break
            elif not _blank(s, p, nl):
                break
            p = nl + 1
        if not closed or not records:
            break
        name = crec.name
        is_entry = crec.is_entry
        comps = builder.comps if hasattr(builder, "module") else None
        if name == "ENTRY" or (comps is not None and name in comps) or (is_entry and comps is not None and builder.entry_name is not None):
            break  # the Python builder reports it
        if comps is None:
            builder._start(rec)
            comps = builder.comps
        comp = computation(name, is_entry=is_entry)
        pending_calls = builder.pending_calls
        mark = len(pending_calls)
        numbers = []
        k, root = _link(records, 0, comp, comp._names, shapes, shape_of, opcodes, parameter, constant, numbers, None,
                        literal_ok, instruction, computation_attrs, pending_calls)
        if k < PyList_GET_SIZE(records):
            del pending_calls[mark:]
            break  # built again, in full, by the Python builder
        if root is None:
            root = comp._tail
            root_index = PyList_GET_SIZE(records) - 1
        comp._root = root
        sorted_numbers = sorted(numbers)
        for i in range(len(sorted_numbers)):
            if sorted_numbers[i] != i:
                break
        else:
            i = -1
        if i >= 0:
            del pending_calls[mark:]
            break  # gaps or repeats: the Python builder says where
        if crec.signature is not None and crec.signature != _signature(records, records[root_index], parameter, opcodes, numbers):
            builder._check_signature(crec, comp)  # the exact check; raises where the header is wrong
        comps[name] = comp
        comp.parent = builder.module
        builder.module.computations.append(comp)
        if is_entry:
            builder.entry_name = name
        built += 1
        lines += 1 + body_lines
        off = p
    return lines, built, off
