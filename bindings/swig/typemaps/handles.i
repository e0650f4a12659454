/* typemaps/handles.i - opaque handles -> owned proxy objects.
 *
 * Each handle type gets a one-pointer "box" struct that the target language owns (SWIG proxy classes
 * Accelerator, Model, ...). Out-parameters (`accel_x_t **out`) never reach the target language: the %extend
 * bodies in accel.i call the C function with a local out-pointer and return a new box (%newobject), or NULL
 * on failure with the status pending (typemaps/status.i). close() frees the handle and leaves an empty box,
 * so a later call raises FailedPreconditionError ("<Class>: used after close()") instead of touching freed
 * memory; the destructor (GC, Dispose(), delete()) frees whatever is left. The C library lets handles be
 * freed in any order, so proxies hold no references to each other. */

%{
#include <string>
#include <vector>

struct Accelerator { accel_accelerator_t *h; };
struct Model { accel_model_t *h; };
struct Optimizer { accel_optimizer_t *h; };
struct Scheduler { accel_scheduler_t *h; };
struct DataLoader { accel_dataloader_t *h; };
struct Batch { accel_batch_t *h; };
struct Tensor { accel_tensor_t *h; };
/* Keys and tensor handles for Model.load_state_dict (accel_model_load_state_dict's parallel arrays). */
struct StateDictEntries {
    std::vector<std::string> keys;
    std::vector<const accel_tensor_t *> tensors;
};

namespace accel_swig {

/* The handle in @p box, or NULL with FAILED_PRECONDITION pending when the box is missing or closed. */
template <class Box>
auto handle(Box *box, const char *cls) -> decltype(box->h)
{
    if (box == nullptr || box->h == nullptr) {
        fail(ACCEL_ERR_FAILED_PRECONDITION, (std::string(cls) + ": used after close()").c_str());
        return nullptr;
    }
    return box->h;
}

/* Like handle(), for arguments the C API accepts as NULL: a null reference passes NULL, a closed object fails. */
template <class Box>
auto optional_handle(Box *box, const char *cls) -> decltype(box->h)
{
    if (box == nullptr)
        return nullptr;
    return handle(box, cls);
}

/* A new box owning @p h, or NULL when @p h is NULL (failure, or "no such object"). */
template <class Box, class H>
Box *wrap(H *h)
{
    if (h == nullptr)
        return nullptr;
    Box *b = new Box;
    b->h = h;
    return b;
}

} // namespace accel_swig

#define ACCEL_H(box, cls) accel_swig::handle((box), cls)
#define ACCEL_OPT_H(box, cls) accel_swig::optional_handle((box), cls)
%}

%define ACCEL_HANDLE_CLASS(CLS)
%nodefaultctor CLS;
%nodefaultdtor CLS;
struct CLS {};
%enddef
