#include "state/state_dict.hpp"

#include "common/error.hpp"

namespace accel {

const PyObj *PyObj::get(const std::string &key) const
{
    if (!is_dict()) return nullptr;
    for (const auto &[k, v] : map)
        if (k->kind == Kind::Str && k->s == key) return v.get();
    return nullptr;
}

const PyObj *PyObj::get_int_key(int64_t key) const
{
    if (!is_dict()) return nullptr;
    for (const auto &[k, v] : map)
        if (k->kind == Kind::Int && k->i == key) return v.get();
    return nullptr;
}

namespace {
PyRef make(PyObj::Kind k)
{
    auto p = std::make_shared<PyObj>();
    p->kind = k;
    return p;
}
} // namespace

PyRef py_none() { return make(PyObj::Kind::None); }
PyRef py_bool(bool v) { auto p = make(PyObj::Kind::Bool); p->b = v; return p; }
PyRef py_int(int64_t v) { auto p = make(PyObj::Kind::Int); p->i = v; return p; }
PyRef py_float(double v) { auto p = make(PyObj::Kind::Float); p->f = v; return p; }
PyRef py_str(std::string v) { auto p = make(PyObj::Kind::Str); p->s = std::move(v); return p; }
PyRef py_bytes(std::string v) { auto p = make(PyObj::Kind::Bytes); p->s = std::move(v); return p; }
PyRef py_list(std::vector<PyRef> items) { auto p = make(PyObj::Kind::List); p->items = std::move(items); return p; }
PyRef py_tuple(std::vector<PyRef> items) { auto p = make(PyObj::Kind::Tuple); p->items = std::move(items); return p; }
PyRef py_dict(std::vector<std::pair<PyRef, PyRef>> items) { auto p = make(PyObj::Kind::Dict); p->map = std::move(items); return p; }
PyRef py_ordered_dict(std::vector<std::pair<PyRef, PyRef>> items)
{
    auto p = make(PyObj::Kind::OrderedDict);
    p->map = std::move(items);
    return p;
}
PyRef py_tensor(at::Tensor t) { auto p = make(PyObj::Kind::Tensor); p->tensor = std::move(t); return p; }
PyRef py_call(std::string global, std::vector<PyRef> args)
{
    auto p = make(PyObj::Kind::Global);
    p->s = std::move(global);
    p->items = std::move(args);
    return p;
}
void py_set(PyObj &dict, const std::string &key, PyRef value) { dict.map.emplace_back(py_str(key), std::move(value)); }

const PyObj &sd_dict(const PyObj *v, const std::string &what)
{
    if (v == nullptr || !v->is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a dict");
    return *v;
}

int64_t sd_int(const PyObj &d, const char *key, const std::string &what)
{
    const PyObj *v = d.get(key);
    if (v == nullptr || v->kind != PyObj::Kind::Int)
        fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" is missing or not an integer");
    return v->i;
}

double sd_number(const PyObj &d, const char *key, const std::string &what)
{
    const PyObj *v = d.get(key);
    if (v != nullptr && v->kind == PyObj::Kind::Float) return v->f;
    if (v != nullptr && v->kind == PyObj::Kind::Int) return static_cast<double>(v->i);
    fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" is missing or not a number");
}

std::optional<double> py_number(const PyObj &v)
{
    if (v.kind == PyObj::Kind::Float) return v.f;
    if (v.kind == PyObj::Kind::Int) return static_cast<double>(v.i);
    if (v.kind == PyObj::Kind::Tensor && v.tensor.numel() == 1) return v.tensor.to(at::kDouble).item<double>();
    return std::nullopt;
}

bool sd_bool(const PyObj &d, const char *key, const std::string &what)
{
    const PyObj *v = d.get(key);
    if (v == nullptr || v->kind != PyObj::Kind::Bool)
        fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" is missing or not a boolean");
    return v->b;
}

std::vector<double> sd_numbers(const PyObj &d, const char *key, const std::string &what, size_t n)
{
    const PyObj *v = d.get(key);
    if (v == nullptr || v->kind != PyObj::Kind::List)
        fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" is missing or not a list");
    std::vector<double> out;
    for (const auto &x : v->items) {
        if (x->kind == PyObj::Kind::Float) out.push_back(x->f);
        else if (x->kind == PyObj::Kind::Int) out.push_back(static_cast<double>(x->i));
        else fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" holds a non-number");
    }
    if (out.size() != n)
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": \"" + key + "\" has " + std::to_string(out.size()) +
                                             " entries, expected " + std::to_string(n));
    return out;
}

} // namespace accel
