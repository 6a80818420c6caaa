# The scanner: character classes, scanner._LINE as a matcher, raw tails, records.
# Part of hlo_tools/_scan.pyx (included there): one extension module, one job per file.

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


cdef object _tail(str text, const unsigned char* s, Fields* f):
    """A line's attributes as the Python scanner keeps them: [] for none, the raw
    text while nothing needs resolving, else [(key, value, offset)]."""
    if f.tail_e == f.tail_s:
        return []
    if _raw_tail(s, f.tail_s, f.tail_e):
        return PyUnicode_Substring(text, f.tail_s, f.tail_e)
    return _split_tail(text, s, f.tail_s, f.tail_e)


cdef object _record(object record_type, str text, const unsigned char* s, Fields* f):
    """The InstrRecord the Python scanner makes of the same line."""
    attrs = _tail(text, s, f)
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
