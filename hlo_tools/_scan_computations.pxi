# Whole computations as XLA prints them: span maps, headers, signatures, build_computations.
# Part of hlo_tools/_scan.pyx (included there): one extension module, one job per file.

# -- whole computations ---------------------------------------------------------------

from libc.stdlib cimport calloc, realloc, free


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
                   Linker linker, list pending_calls, dict comps, list resolved_calls, Py_ssize_t* root_line):
    """Builds a computation's lines into ``comp`` as ``link_fast`` does their records;
    returns the root, or None where the Python builder must read the computation."""
    cdef Py_ssize_t i
    cdef Fields* f
    cdef dict attrs
    cdef tuple fields
    tail = None
    root = None
    root_line[0] = -1
    for i in range(n):
        f = &lines[i]
        name = PyUnicode_Substring(text, f.name_s, f.name_e)
        if PyDict_GetItem(names, name) != NULL:
            return None
        shape = _lookup(_SHAPE_MAP, text, s, f.shape_s, f.shape_e, linker.shape_of)
        if shape is None:
            return None
        opcode = _lookup(_OPCODE_MAP, text, s, f.op_s, f.op_e, linker.opcodes.get)
        if opcode is None:
            return None
        attrs_rec = _tail(text, s, f)
        attrs = None
        if type(attrs_rec) is not str and attrs_rec:
            attrs = _attribute_dict(<list>attrs_rec, linker.computation_attrs)
            if attrs is None:
                return None
        shape_text = PyUnicode_Substring(text, f.shape_s, f.shape_e) if opcode is linker.constant else None
        fields = linker.operand_fields(text, f.ops_s, f.ops_e, opcode, shape, shape_text, names)
        if fields is None:
            return None
        if f.root and root is not None:
            return None
        instr = _make(linker.instruction, comp, name, opcode, shape, fields[0], attrs, attrs_rec, fields[1], fields[2],
                      tail, linker.computation_attrs, pending_calls, comps, resolved_calls)
        if f.root:
            root = instr
            root_line[0] = i
        _append(comp, names, name, instr, tail)
        tail = instr
    comp._tail = tail
    comp._count = n
    if root is None:
        root = tail
        root_line[0] = n - 1
    return root


def build_computations(str text, Py_ssize_t off, object rec, object builder, object computation_header,
                       object computation, Linker linker):
    """Scans and builds whole computations from offset ``off`` while each is in the
    form XLA prints (a one-line header, instruction lines ``_LINE`` matches, ``}``
    alone; blank lines around) and every line takes the builder's fast path; the
    first computation that is not is left whole to the Python scanner and builder
    (nothing of it kept).  Does what ``Builder.add`` does for each: same checks,
    same Computation.  Returns (lines read, computations built, offset)."""
    global _lines, _lines_cap, _params, _params_cap
    if not PyUnicode_IS_COMPACT_ASCII(text):
        raise ValueError("the compiled scanner reads ASCII text only")
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
        root = _built(text, s, _lines, count, comp, comp._names, linker, pending_calls, comps, resolved_calls, &root_line)
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
