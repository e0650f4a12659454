#include "checkpointing/pickle.hpp"

#include "common/error.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace accel::ckpt {

bool is_call_global(const std::string &name)
{
    return name == "torch.Size" || name == "builtins.set" || name == "deepspeed.runtime.fp16.loss_scaler.LossScaler" ||
           name == "deepspeed.runtime.zero.config.ZeroStageEnum";
}

bool is_numpy_dtype(const PyObj &o) { return o.kind == PyObj::Kind::Global && o.s == "numpy.dtype"; }
bool is_numpy_array(const PyObj &o)
{
    return o.kind == PyObj::Kind::Global &&
           (o.s == "numpy.core.multiarray._reconstruct" || o.s == "numpy._core.multiarray._reconstruct");
}
std::string numpy_code(const PyObj &dtype) { return dtype.items.empty() ? "" : dtype.items[0]->s; }

namespace {
PyRef make(PyObj::Kind k)
{
    auto p = std::make_shared<PyObj>();
    p->kind = k;
    return p;
}

struct StorageName {
    at::ScalarType type;
    const char *name;
};
constexpr StorageName kStorageNames[] = {
    {at::kFloat, "FloatStorage"},   {at::kDouble, "DoubleStorage"},     {at::kHalf, "HalfStorage"},
    {at::kBFloat16, "BFloat16Storage"}, {at::kLong, "LongStorage"},     {at::kInt, "IntStorage"},
    {at::kShort, "ShortStorage"},   {at::kChar, "CharStorage"},         {at::kByte, "ByteStorage"},
    {at::kBool, "BoolStorage"},     {at::kComplexFloat, "ComplexFloatStorage"},
    {at::kComplexDouble, "ComplexDoubleStorage"},
};

std::optional<at::ScalarType> storage_type_from_name(const std::string &n)
{
    for (const auto &r : kStorageNames)
        if (n == r.name) return r.type;
    return std::nullopt;
}

// ---- writer ----------------------------------------------------------------------------------------

class Pickler {
public:
    explicit Pickler(const StorageSaver &saver) : saver_(saver) {}

    std::string run(const PyObj &obj)
    {
        out_ += "\x80\x02";
        write(obj);
        out_ += '.';
        return std::move(out_);
    }

private:
    void u8(uint8_t v) { out_ += static_cast<char>(v); }
    void le32(uint32_t v)
    {
        for (int k = 0; k < 4; ++k) u8(static_cast<uint8_t>(v >> (8 * k)));
    }
    void str(const std::string &s)
    {
        u8('X');
        le32(static_cast<uint32_t>(s.size()));
        out_ += s;
    }
    void global(const char *module, const char *name)
    {
        u8('c');
        out_ += module;
        out_ += '\n';
        out_ += name;
        out_ += '\n';
    }
    void integer(int64_t v)
    {
        if (v >= 0 && v < 256) {
            u8('K');
            u8(static_cast<uint8_t>(v));
        } else if (v >= 0 && v < 65536) {
            u8('M');
            u8(static_cast<uint8_t>(v));
            u8(static_cast<uint8_t>(v >> 8));
        } else if (v >= INT32_MIN && v <= INT32_MAX) {
            u8('J');
            le32(static_cast<uint32_t>(static_cast<int32_t>(v)));
        } else {
            // LONG1: little-endian two's complement, shortest form.
            std::string bytes;
            int64_t x = v;
            for (;;) {
                bytes += static_cast<char>(static_cast<uint8_t>(x & 0xFF));
                int64_t rest = x >> 8;
                bool sign = (static_cast<uint8_t>(bytes.back()) & 0x80) != 0;
                if ((rest == 0 && !sign) || (rest == -1 && sign)) break;
                x = rest;
            }
            u8(0x8a);
            u8(static_cast<uint8_t>(bytes.size()));
            out_ += bytes;
        }
    }
    void int_tuple(c10::IntArrayRef v)
    {
        if (v.empty()) {
            u8(')');
            return;
        }
        if (v.size() > 3) u8('(');
        for (int64_t x : v) integer(x);
        if (v.size() == 1) u8(0x85);
        else if (v.size() == 2) u8(0x86);
        else if (v.size() == 3) u8(0x87);
        else u8('t');
    }
    void tensor(const at::Tensor &t)
    {
        StorageRef ref = saver_(t);
        global("torch._utils", "_rebuild_tensor_v2");
        u8('(');
        u8('(');
        str("storage");
        global("torch", ref.type_name.c_str());
        str(ref.key);
        str("cpu");
        integer(ref.numel);
        u8('t');
        u8('Q'); // BINPERSID
        integer(t.storage_offset());
        int_tuple(t.sizes());
        int_tuple(t.strides());
        u8(t.requires_grad() ? 0x88 : 0x89);
        global("collections", "OrderedDict");
        u8(')');
        u8('R');
        u8('t');
        u8('R');
    }
    void items_dict(const std::vector<std::pair<PyRef, PyRef>> &m)
    {
        if (m.empty()) return;
        u8('(');
        for (const auto &[k, v] : m) {
            write(*k);
            write(*v);
        }
        u8('u');
    }
    void write(const PyObj &o)
    {
        switch (o.kind) {
        case PyObj::Kind::None: u8('N'); break;
        case PyObj::Kind::Bool: u8(o.b ? 0x88 : 0x89); break;
        case PyObj::Kind::Int: integer(o.i); break;
        case PyObj::Kind::Float: {
            u8('G');
            uint64_t bits;
            std::memcpy(&bits, &o.f, 8);
            for (int k = 7; k >= 0; --k) u8(static_cast<uint8_t>(bits >> (8 * k))); // big-endian
            break;
        }
        case PyObj::Kind::Str: str(o.s); break;
        case PyObj::Kind::Bytes:
            // BINBYTES (protocol 3 opcode; Python's unpickler reads it whatever the declared protocol).
            u8('B');
            le32(static_cast<uint32_t>(o.s.size()));
            out_ += o.s;
            break;
        case PyObj::Kind::List:
            u8(']');
            if (!o.items.empty()) {
                u8('(');
                for (const auto &v : o.items) write(*v);
                u8('e');
            }
            break;
        case PyObj::Kind::Tuple:
            if (o.items.empty()) {
                u8(')');
            } else {
                u8('(');
                for (const auto &v : o.items) write(*v);
                u8('t');
            }
            break;
        case PyObj::Kind::Dict:
            u8('}');
            items_dict(o.map);
            break;
        case PyObj::Kind::OrderedDict:
            global("collections", "OrderedDict");
            u8(')');
            u8('R');
            items_dict(o.map);
            break;
        case PyObj::Kind::Tensor: tensor(o.tensor); break;
        case PyObj::Kind::Global:
            // A NumPy object as read (see is_numpy_dtype / is_numpy_array): the call that makes it, then its
            // __setstate__ (BUILD), which is how NumPy's own pickling writes it.
            if (is_numpy_dtype(o)) {
                global("numpy", "dtype");
                write(*py_tuple({py_str(numpy_code(o)), py_bool(false), py_bool(true)}));
            } else if (is_numpy_array(o)) {
                global(o.s.substr(0, o.s.size() - std::string("._reconstruct").size()).c_str(), "_reconstruct");
                global("numpy", "ndarray");
                write(*py_tuple({py_int(0)}));
                write(*py_bytes("b"));
                u8(0x87);
            } else if (is_call_global(o.s)) { // py_call: the global called with its arguments
                const size_t dot = o.s.rfind('.');
                global(o.s.substr(0, dot).c_str(), o.s.substr(dot + 1).c_str());
                write(*py_tuple(o.items));
                u8('R');
                break;
            } else {
                fail(ACCEL_ERR_INTERNAL, "pickle: cannot write the global " + o.s);
            }
            u8('R');
            write(*py_tuple(std::vector<PyRef>(o.items.begin() + (is_numpy_dtype(o) ? 1 : 0), o.items.end())));
            u8('b');
            break;
        default: fail(ACCEL_ERR_INTERNAL, "pickle: cannot write this object kind");
        }
    }

    const StorageSaver &saver_;
    std::string out_;
};

// ---- reader ----------------------------------------------------------------------------------------

class Unpickler {
public:
    Unpickler(const uint8_t *p, size_t n, const StorageLoader &loader, const std::string &what)
        : p_(p), n_(n), loader_(loader), what_(what)
    {
    }

    PyRef run()
    {
        for (;;) {
            uint8_t op = byte();
            switch (op) {
            case 0x80: byte(); break; // PROTO
            case 0x95: take(8); break; // FRAME (protocol 4): frames are just a hint
            case '.': {
                if (stack_.size() != 1 || !marks_.empty()) bad("the stack is not a single object at STOP");
                return stack_.back();
            }
            case '(': marks_.push_back(stack_.size()); break;
            case 'N': push(py_none()); break;
            case 0x88: push(py_bool(true)); break;
            case 0x89: push(py_bool(false)); break;
            case 'K': push(py_int(byte())); break;
            case 'M': {
                const uint8_t *b = take(2);
                push(py_int(b[0] | (b[1] << 8)));
                break;
            }
            case 'J': push(py_int(static_cast<int32_t>(le(4)))); break;
            case 0x8a: long1(byte()); break;
            case 0x8b: {
                uint64_t len = le(4);
                long1(len);
                break;
            }
            case 'G': {
                const uint8_t *b = take(8);
                uint64_t bits = 0;
                for (int k = 0; k < 8; ++k) bits = (bits << 8) | b[k];
                double d;
                std::memcpy(&d, &bits, 8);
                push(py_float(d));
                break;
            }
            case 'X': push(py_str(bytes(le(4)))); break;
            case 0x8c: push(py_str(bytes(byte()))); break;      // SHORT_BINUNICODE
            case 0x8d: push(py_str(bytes(le(8)))); break;       // BINUNICODE8
            case 'B': push(py_bytes(bytes(le(4)))); break;      // BINBYTES
            case 'C': push(py_bytes(bytes(byte()))); break;     // SHORT_BINBYTES
            case 0x8e: push(py_bytes(bytes(le(8)))); break;     // BINBYTES8
            case ')': push(py_tuple()); break;
            case 0x85: tuple_n(1); break;
            case 0x86: tuple_n(2); break;
            case 0x87: tuple_n(3); break;
            case 't': push(py_tuple(pop_mark())); break;
            case ']': push(py_list()); break;
            case 'l': push(py_list(pop_mark())); break;
            case '}': push(py_dict()); break;
            case 'd': {
                auto items = pop_mark();
                if (items.size() % 2) bad("DICT with an odd number of items");
                auto d = py_dict();
                for (size_t k = 0; k < items.size(); k += 2) d->map.emplace_back(items[k], items[k + 1]);
                push(d);
                break;
            }
            case 'a': {
                PyRef v = pop();
                auto &l = container(PyObj::Kind::List);
                check_acyclic(l, {v});
                l.items.push_back(v);
                break;
            }
            case 'e': {
                auto items = pop_mark();
                auto &l = container(PyObj::Kind::List);
                check_acyclic(l, items);
                l.items.insert(l.items.end(), items.begin(), items.end());
                break;
            }
            case 's': {
                PyRef v = pop();
                PyRef k = pop();
                auto &d = dict_top();
                check_acyclic(d, {k, v});
                d.map.emplace_back(k, v);
                break;
            }
            case 'u': {
                auto items = pop_mark();
                if (items.size() % 2) bad("SETITEMS with an odd number of items");
                auto &d = dict_top();
                check_acyclic(d, items);
                for (size_t k = 0; k < items.size(); k += 2) d.map.emplace_back(items[k], items[k + 1]);
                break;
            }
            case 'c': {
                std::string module = line();
                std::string name = line();
                auto g = make(PyObj::Kind::Global);
                g->s = module + "." + name;
                push(g);
                break;
            }
            case 0x93: { // STACK_GLOBAL
                PyRef name = pop();
                PyRef module = pop();
                if (name->kind != PyObj::Kind::Str || module->kind != PyObj::Kind::Str) bad("STACK_GLOBAL needs strings");
                auto g = make(PyObj::Kind::Global);
                g->s = module->s + "." + name->s;
                push(g);
                break;
            }
            case 'R': {
                PyRef args = pop();
                PyRef fn = pop();
                push(reduce(*fn, *args));
                break;
            }
            case 0x81: { // NEWOBJ
                PyRef args = pop();
                PyRef cls = pop();
                push(reduce(*cls, *args));
                break;
            }
            case 'b': { // BUILD: NumPy objects take their state; for tensors (python attributes) it is ignored
                PyRef st = pop();
                if (stack_.empty()) bad("BUILD on an empty stack");
                check_acyclic(*stack_.back(), {st});
                build(*stack_.back(), st);
                break;
            }
            case 'Q': {
                PyRef pid = pop();
                push(persistent_load(*pid));
                break;
            }
            case 'q': memo_put(byte()); break;
            case 'r': memo_put(le(4)); break;
            case 0x94: memo_put(memo_.size()); break; // MEMOIZE
            case 'h': memo_get(byte()); break;
            case 'j': memo_get(le(4)); break;
            case '0': pop(); break;
            case '1': pop_mark(); break;
            case '2': {
                if (stack_.empty()) bad("DUP on an empty stack");
                push(stack_.back());
                break;
            }
            default: {
                char buf[8];
                std::snprintf(buf, sizeof buf, "0x%02x", op);
                bad(std::string("unsupported pickle opcode ") + buf + " at byte " + std::to_string(i_ - 1));
            }
            }
        }
    }

private:
    [[noreturn]] void bad(const std::string &msg) const { fail(ACCEL_ERR_DATA_LOSS, what_ + ": " + msg); }
    uint8_t byte()
    {
        if (i_ >= n_) bad("truncated pickle data");
        return p_[i_++];
    }
    const uint8_t *take(uint64_t k)
    {
        if (k > n_ - i_) bad("truncated pickle data");
        const uint8_t *r = p_ + i_;
        i_ += k;
        return r;
    }
    uint64_t le(int k)
    {
        const uint8_t *b = take(static_cast<uint64_t>(k));
        uint64_t v = 0;
        for (int j = k - 1; j >= 0; --j) v = (v << 8) | b[j];
        return v;
    }
    std::string bytes(uint64_t k)
    {
        const uint8_t *b = take(k);
        return std::string(reinterpret_cast<const char *>(b), k);
    }
    std::string line()
    {
        std::string s;
        for (;;) {
            char c = static_cast<char>(byte());
            if (c == '\n') return s;
            s += c;
            if (s.size() > 256) bad("GLOBAL name too long");
        }
    }
    void long1(uint64_t len)
    {
        if (len > 8) bad("integer wider than 64 bits");
        const uint8_t *b = take(len);
        uint64_t v = 0;
        for (int j = static_cast<int>(len) - 1; j >= 0; --j) v = (v << 8) | b[j];
        if (len > 0 && len < 8 && (b[len - 1] & 0x80)) v |= ~uint64_t(0) << (8 * len); // sign-extend
        push(py_int(static_cast<int64_t>(v)));
    }
    void push(PyRef v)
    {
        if (stack_.size() > (1u << 24)) bad("pickle stack too deep");
        stack_.push_back(std::move(v));
    }
    PyRef pop()
    {
        if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) bad("pickle stack underflow");
        PyRef v = std::move(stack_.back());
        stack_.pop_back();
        return v;
    }
    std::vector<PyRef> pop_mark()
    {
        if (marks_.empty()) bad("no MARK on the stack");
        size_t m = marks_.back();
        marks_.pop_back();
        std::vector<PyRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
        stack_.resize(m);
        return items;
    }
    void tuple_n(size_t k)
    {
        std::vector<PyRef> items(k);
        for (size_t j = k; j-- > 0;) items[j] = pop();
        push(py_tuple(std::move(items)));
    }
    // A container put inside itself (directly or deeper, through the memo) would be a cycle of shared
    // pointers that is never freed; torch.save never writes one, so such a pickle is refused (found by
    // fuzzing, as a leak). The values' subtrees are walked once each.
    void check_acyclic(const PyObj &target, const std::vector<PyRef> &values)
    {
        std::vector<const PyObj *> todo;
        std::set<const PyObj *> seen;
        for (const auto &v : values) todo.push_back(v.get());
        while (!todo.empty()) {
            const PyObj *o = todo.back();
            todo.pop_back();
            if (o == nullptr || (o->items.empty() && o->map.empty() && o != &target)) continue;
            if (o == &target) bad("a container that holds itself (torch.save never writes one)");
            if (!seen.insert(o).second) continue;
            for (const auto &i : o->items) todo.push_back(i.get());
            for (const auto &kv : o->map) {
                todo.push_back(kv.first.get());
                todo.push_back(kv.second.get());
            }
        }
    }
    PyObj &container(PyObj::Kind k)
    {
        if (stack_.empty() || stack_.back()->kind != k) bad("APPEND(S) target is not a list");
        return *stack_.back();
    }
    PyObj &dict_top()
    {
        if (stack_.empty() || !stack_.back()->is_dict()) bad("SETITEM(S) target is not a dict");
        return *stack_.back();
    }
    void memo_put(uint64_t idx)
    {
        if (stack_.empty()) bad("memo store from an empty stack");
        if (idx > (1u << 26)) bad("memo index too large");
        memo_[idx] = stack_.back();
    }
    void memo_get(uint64_t idx)
    {
        auto it = memo_.find(idx);
        if (it == memo_.end()) bad("memo index " + std::to_string(idx) + " was never stored");
        push(it->second);
    }

    static std::vector<int64_t> int_list(const PyObj &o, bool &ok)
    {
        std::vector<int64_t> v;
        ok = o.kind == PyObj::Kind::Tuple || o.kind == PyObj::Kind::List;
        if (!ok) return v;
        for (const auto &x : o.items) {
            if (x->kind != PyObj::Kind::Int) {
                ok = false;
                return v;
            }
            v.push_back(x->i);
        }
        return v;
    }

    PyRef rebuild_tensor(const PyObj &args)
    {
        if (args.kind != PyObj::Kind::Tuple || args.items.size() < 4) bad("_rebuild_tensor_v2: bad arguments");
        const PyObj &storage = *args.items[0];
        if (storage.kind != PyObj::Kind::Storage) bad("_rebuild_tensor_v2: the first argument is not a storage");
        if (args.items[1]->kind != PyObj::Kind::Int) bad("_rebuild_tensor_v2: storage offset is not an integer");
        int64_t offset = args.items[1]->i;
        bool ok1, ok2;
        auto size = int_list(*args.items[2], ok1);
        auto stride = int_list(*args.items[3], ok2);
        if (!ok1 || !ok2 || size.size() != stride.size()) bad("_rebuild_tensor_v2: bad size/stride");
        // Every element the view can reach must lie inside the storage.
        const int64_t numel = storage.tensor.numel();
        if (offset < 0) bad("_rebuild_tensor_v2: negative storage offset");
        bool empty = false;
        __int128 last = offset;
        for (size_t k = 0; k < size.size(); ++k) {
            if (size[k] < 0 || stride[k] < 0) bad("_rebuild_tensor_v2: negative size or stride");
            if (size[k] == 0) empty = true;
            else last += static_cast<__int128>(size[k] - 1) * stride[k];
        }
        if (!empty && last >= numel)
            bad("tensor view (offset " + std::to_string(offset) + ") reaches beyond its storage of " +
                std::to_string(numel) + " elements");
        at::Tensor t = empty ? at::empty(size, storage.tensor.options())
                             : storage.tensor.as_strided(size, stride, offset);
        bool requires_grad = args.items.size() > 4 && args.items[4]->kind == PyObj::Kind::Bool && args.items[4]->b;
        (void)requires_grad; // state tensors are data; gradients are never restored
        return py_tensor(t);
    }

    // NumPy dtypes a random-state file may hold: code -> item size (little-endian or byte-order free).
    static size_t numpy_item_size(const std::string &code)
    {
        static const std::map<std::string, size_t> kCodes = {{"u1", 1}, {"u2", 2}, {"u4", 4}, {"u8", 8}, {"i1", 1},
                                                             {"i2", 2}, {"i4", 4}, {"i8", 8}, {"f4", 4}, {"f8", 8},
                                                             {"b1", 1}};
        auto it = kCodes.find(code);
        return it == kCodes.end() ? 0 : it->second;
    }

    void build(PyObj &obj, const PyRef &state)
    {
        if (is_numpy_dtype(obj)) {
            // (3, byte order, subarray, names, fields, elsize, alignment, flags): a plain scalar dtype only.
            const auto &t = state->items;
            if (state->kind != PyObj::Kind::Tuple || t.size() != 8 || t[0]->kind != PyObj::Kind::Int || t[0]->i != 3 ||
                t[1]->kind != PyObj::Kind::Str || (t[1]->s != "<" && t[1]->s != "|" && t[1]->s != "=") ||
                t[2]->kind != PyObj::Kind::None || t[3]->kind != PyObj::Kind::None || t[4]->kind != PyObj::Kind::None ||
                t[5]->kind != PyObj::Kind::Int || t[6]->kind != PyObj::Kind::Int || t[7]->kind != PyObj::Kind::Int)
                bad("numpy.dtype: unsupported state (only little-endian scalar dtypes are read)");
            if (obj.items.size() != 1) bad("numpy.dtype: state set twice");
            obj.items.insert(obj.items.end(), t.begin(), t.end());
            return;
        }
        if (is_numpy_array(obj)) {
            // (1, shape, dtype, fortran order, raw bytes)
            const auto &t = state->items;
            if (state->kind != PyObj::Kind::Tuple || t.size() != 5 || t[0]->kind != PyObj::Kind::Int || t[0]->i != 1 ||
                t[1]->kind != PyObj::Kind::Tuple || !is_numpy_dtype(*t[2]) || t[2]->items.size() != 9 ||
                t[3]->kind != PyObj::Kind::Bool || t[4]->kind != PyObj::Kind::Bytes)
                bad("numpy.ndarray: unsupported state (expected (1, shape, dtype, fortran_order, bytes))");
            if (!obj.items.empty()) bad("numpy.ndarray: state set twice");
            unsigned __int128 n = numpy_item_size(numpy_code(*t[2]));
            if (t[1]->items.size() > 32) bad("numpy.ndarray: too many dimensions");
            for (const auto &d : t[1]->items) {
                if (d->kind != PyObj::Kind::Int || d->i < 0) bad("numpy.ndarray: bad shape");
                n *= static_cast<uint64_t>(d->i);
                if (n > (uint64_t(1) << 40)) bad("numpy.ndarray: too large");
            }
            if (n != t[4]->s.size())
                bad("numpy.ndarray: " + std::to_string(t[4]->s.size()) + " data bytes for " +
                    std::to_string(static_cast<uint64_t>(n)) + " expected by its shape and dtype");
            obj.items = t;
            return;
        }
        // Anything else (python attributes of a rebuilt tensor): ignored; every object it could apply to
        // was already allow-listed by REDUCE.
    }

    PyRef reduce(const PyObj &fn, const PyObj &args)
    {
        if (fn.kind != PyObj::Kind::Global) bad("REDUCE of something that is not a global");
        if (args.kind != PyObj::Kind::Tuple) bad("REDUCE arguments are not a tuple");
        const std::string &g = fn.s;
        if (g == "collections.OrderedDict") {
            if (!args.items.empty()) bad("OrderedDict with arguments is not supported");
            return py_ordered_dict();
        }
        if (g == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args);
        // NumPy's legacy RNG state (numpy.random.get_state()) in Accelerate's random_states_{i}.pkl.
        if (g == "numpy.core.multiarray._reconstruct" || g == "numpy._core.multiarray._reconstruct") {
            if (args.items.size() != 3 || args.items[0]->kind != PyObj::Kind::Global ||
                args.items[0]->s != "numpy.ndarray" || args.items[2]->kind != PyObj::Kind::Bytes || args.items[2]->s != "b")
                bad("_reconstruct: only numpy.ndarray(shape, \"b\") is read");
            auto a = make(PyObj::Kind::Global);
            a->s = g; // items: the state, set by BUILD
            return a;
        }
        if (g == "numpy.dtype") {
            if (args.items.size() != 3 || args.items[0]->kind != PyObj::Kind::Str || numpy_item_size(args.items[0]->s) == 0 ||
                args.items[1]->kind != PyObj::Kind::Bool || args.items[2]->kind != PyObj::Kind::Bool)
                bad("numpy.dtype: only little-endian integer, float and bool dtypes are read");
            auto d = make(PyObj::Kind::Global);
            d->s = g;
            d->items = {args.items[0]}; // the code ("u4"), then the state, set by BUILD
            return d;
        }
        // The objects DeepSpeed's checkpoint layout holds (as accel writes it): a torch.Size is read as its
        // tuple, a set as a list, ZeroStageEnum(n) as n; a LossScaler stays a call.
        if (g == "torch.Size" || g == "builtins.set" || g == "__builtin__.set") {
            const PyObj::Kind want = g == "torch.Size" ? PyObj::Kind::Tuple : PyObj::Kind::List;
            if (args.items.size() != 1 || args.items[0]->kind != want) bad(g + ": bad arguments");
            return args.items[0];
        }
        if (g == "deepspeed.runtime.zero.config.ZeroStageEnum") {
            if (args.items.size() != 1 || args.items[0]->kind != PyObj::Kind::Int) bad(g + ": bad arguments");
            return args.items[0];
        }
        if (g == "deepspeed.runtime.fp16.loss_scaler.LossScaler") {
            auto c = make(PyObj::Kind::Global);
            c->s = g;
            c->items = args.items;
            return c;
        }
        if (g == "torch._utils._rebuild_parameter") {
            if (args.items.empty() || args.items[0]->kind != PyObj::Kind::Tensor) bad("_rebuild_parameter: bad arguments");
            return args.items[0];
        }
        if (g == "_codecs.encode") { // how protocol 2 stores bytes: encode(latin-1 text, "latin1")
            if (args.items.size() != 2 || args.items[0]->kind != PyObj::Kind::Str) bad("_codecs.encode: bad arguments");
            std::string out;
            const std::string &s = args.items[0]->s;
            for (size_t k = 0; k < s.size(); ++k) {
                unsigned char c = static_cast<unsigned char>(s[k]);
                if (c < 0x80) out += static_cast<char>(c);
                else if ((c == 0xC2 || c == 0xC3) && k + 1 < s.size())
                    out += static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(s[++k]) & 0x3F));
                else bad("_codecs.encode: not latin-1 text");
            }
            return py_bytes(out);
        }
        bad("unsupported global \"" + g + "\" (only state dicts of tensors and plain Python values are read)");
    }

    PyRef persistent_load(const PyObj &pid)
    {
        if (pid.kind != PyObj::Kind::Tuple || pid.items.size() != 5 || pid.items[0]->kind != PyObj::Kind::Str ||
            pid.items[0]->s != "storage")
            bad("persistent id is not a (\"storage\", type, key, location, numel) tuple");
        const PyObj &type = *pid.items[1];
        if (type.kind != PyObj::Kind::Global || type.s.rfind("torch.", 0) != 0) bad("storage type is not a torch global");
        auto dtype = storage_type_from_name(type.s.substr(6));
        if (!dtype) bad("unsupported storage type \"" + type.s + "\"");
        if (pid.items[2]->kind != PyObj::Kind::Str || pid.items[4]->kind != PyObj::Kind::Int || pid.items[4]->i < 0)
            bad("bad storage key or size");
        const std::string &key = pid.items[2]->s;
        auto cached = storages_.find(key);
        if (cached != storages_.end()) return cached->second;
        auto s = make(PyObj::Kind::Storage);
        s->s = key;
        s->tensor = loader_(key, *dtype, pid.items[4]->i);
        storages_[key] = s;
        return s;
    }

    const uint8_t *p_;
    size_t n_;
    size_t i_ = 0;
    const StorageLoader &loader_;
    const std::string &what_;
    std::vector<PyRef> stack_;
    std::vector<size_t> marks_;
    std::map<uint64_t, PyRef> memo_;
    std::map<std::string, PyRef> storages_;
};

} // namespace

const char *storage_type_name(at::ScalarType t)
{
    for (const auto &r : kStorageNames)
        if (r.type == t) return r.name;
    fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("pickle: tensors of dtype ") + c10::toString(t) +
                                         " cannot be saved in a torch pickle by accel");
}

std::string pickle_dumps(const PyObj &obj, const StorageSaver &save_storage) { return Pickler(save_storage).run(obj); }

PyRef pickle_loads(const uint8_t *data, size_t len, const StorageLoader &load_storage, const std::string &what)
{
    return Unpickler(data, len, load_storage, what).run();
}

} // namespace accel::ckpt
