# The builder's fast path: Instruction's slots, operands, attributes, link_fast.
# Part of hlo_tools/_scan.pyx (included there): one extension module, one job per file.

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


cdef inline object _new(object cls):
    """``object.__new__(cls)`` for a plain Python class: its allocation, no call."""
    return PyType_GenericAlloc(<PyTypeObject*>cls, 0)


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


cdef class Linker:
    """What the builder's fast path looks things up in, and calls back for: given
    once per module by ``Builder`` (its ``_linker``)."""
    cdef dict shapes, opcodes
    cdef set literals_ok
    cdef object shape_of, parameter, constant, literal_ok, instruction, strip_comments
    cdef frozenset computation_attrs

    def __init__(self, dict shapes, object shape_of, dict opcodes, object parameter, object constant, set literals_ok,
                 object literal_ok, object instruction, frozenset computation_attrs, object strip_comments):
        self.shapes, self.shape_of, self.opcodes = shapes, shape_of, opcodes
        self.parameter, self.constant = parameter, constant
        self.literals_ok, self.literal_ok = literals_ok, literal_ok
        self.instruction, self.computation_attrs, self.strip_comments = instruction, computation_attrs, strip_comments
        if instruction is not _slots_of:
            slot_offsets(instruction)

    cdef tuple operand_fields(self, str text, Py_ssize_t a, Py_ssize_t b, object opcode, object shape,
                              str shape_text, dict names):
        """(operands, parameter number, literal) of the operand list text[a:b] as the
        builder's fast path reads it (digits for a parameter, a literal its check
        accepts, ``%a, %b`` names defined before); None where it leaves the line."""
        cdef const unsigned char* s
        cdef Py_ssize_t pn = 0, i
        if not PyUnicode_IS_COMPACT_ASCII(text):
            return None
        s = <const unsigned char*>PyUnicode_DATA(text)
        if opcode is self.parameter:
            if b - a == 0 or b - a >= 19:
                return None
            for i in range(a, b):
                if not _is_digit(s[i]):
                    return None
                pn = pn * 10 + (s[i] - 48)
            return (), pn, None
        if opcode is self.constant:
            while a < b and _is_space(s[a]):
                a += 1
            while b > a and _is_space(s[b - 1]):
                b -= 1
            if a == b:
                return None
            literal = PyUnicode_Substring(text, a, b)
            if (literal, shape_text) not in self.literals_ok and not self.literal_ok(literal, shape, shape_text):
                return None
            return (), None, literal
        operands = _operands(text, a, b, names, self.strip_comments)
        return None if operands is None else (operands, None, None)


cdef inline void _append(object comp, dict names, str name, object instr, object tail):
    """Computation._link, appending ``instr`` after ``tail``."""
    names[name] = instr
    if tail is None:
        comp._head = instr
    else:
        _set(tail, NEXT, instr)


def link_fast(list records, Py_ssize_t k, object comp, dict names, list numbers, object root, list pending_calls,
              Linker linker):
    """Builds and links ``records[k:]`` while each is the builder's fast case (shape
    cached or parsed by ``shape_of``, plain opcode, ``%a, %b`` operands, a new name,
    at most one ROOT; the attribute tail raw, or split with called computations to
    resolve later); returns (index of the first record left to the Python builder,
    root so far).  Exactly ``Builder._computation``'s paths for those records, slot
    for slot ``Instruction._init_slots`` and ``Computation._link`` (tested on the corpus)."""
    cdef Py_ssize_t n = PyList_GET_SIZE(records)
    cdef tuple r, fields
    cdef str name, operand_text
    cdef dict attrs
    cdef PyObject* p
    tail = comp._tail
    count = comp._count
    try:
        while k < n:
            r = <tuple>PyList_GET_ITEM(records, k)
            name = <str>PyTuple_GET_ITEM(r, 2)
            if PyDict_GetItem(names, name) != NULL:
                break
            shape_text = <str>PyTuple_GET_ITEM(r, 3)
            p = PyDict_GetItem(linker.shapes, shape_text)
            if p != NULL:
                shape = <object>p
            else:  # parsed and cached as the builder's general path does; None: that path says why
                shape = linker.shape_of(shape_text)
                if shape is None:
                    break
            p = PyDict_GetItem(linker.opcodes, <object>PyTuple_GET_ITEM(r, 5))
            if p == NULL:
                break
            opcode = <object>p
            attrs_rec = <object>PyTuple_GET_ITEM(r, 9)
            attrs = None
            if type(attrs_rec) is not str and attrs_rec:
                attrs = _attribute_dict(<list>attrs_rec, linker.computation_attrs)
                if attrs is None:
                    break
            operand_text = <str>PyTuple_GET_ITEM(r, 7)
            fields = linker.operand_fields(operand_text, 0, PyUnicode_GET_LENGTH(operand_text), opcode, shape, shape_text,
                                           names)
            if fields is None:  # the Python builder reads it (or says what is wrong)
                break
            is_root = <object>PyTuple_GET_ITEM(r, 1)
            if is_root and root is not None:
                break
            instr = _make(linker.instruction, comp, name, opcode, shape, fields[0], attrs, attrs_rec, fields[1], fields[2],
                          tail, linker.computation_attrs, pending_calls, None, None)
            if fields[1] is not None:
                numbers.append(fields[1])
            if is_root:
                root = instr
            _append(comp, names, name, instr, tail)
            count += 1
            tail = instr
            k += 1
    finally:
        comp._tail = tail
        comp._count = count
    return k, root
