/** @file
 * Dispatch with CPU and disk offload (Accelerate's dispatch_model and load_checkpoint_and_dispatch): each module's
 * weights live where a device map says ({"model.layers.0": "disk", "lm_head": "cpu", "": "cpu"}; the longest
 * matching module name wins; accel_model_infer_auto_device_map computes one). Modules mapped to "disk" keep their
 * weights in an offload folder in Accelerate's format (index.json + one \<name\>.dat per tensor, as Python's
 * offload_state_dict writes and load_offloaded_weights reads): between forwards their parameters hold no memory,
 * and each top-level layer's are read from the folder just before it computes and released after it. The
 * execution device is the CPU (GPU targets are ACCEL_ERR_UNIMPLEMENTED), so "cpu" modules stay in memory and
 * "disk" is what saves memory. A dispatched model is for inference: accel_model_forward_no_grad and
 * accel_model_generate give the same values as the model in memory; a forward with gradients, reading or writing
 * its tensors, and accel_accelerator_prepare are ACCEL_ERR_FAILED_PRECONDITION. docs/guides/big-models.md. */
#ifndef ACCEL_DISPATCH_H
#define ACCEL_DISPATCH_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Accelerate's dispatch_model: places @p model's modules as @p device_map_json says.
 *
 * @p options_json (NULL = defaults): "offload_dir" (or "offload_folder"; needed when a module is mapped to
 * "disk": if it holds no index.json, the disk modules' parameters and buffers are written there first, otherwise
 * the folder's entries are the weights, as in Accelerate), "offload_buffers" (false: disk modules' buffers stay in
 * memory; true: they are read from the folder with their module's parameters and released after it, like them),
 * "force_hooks" (false), "main_device" ("cpu"; anything else
 * ACCEL_ERR_UNIMPLEMENTED). A map with every module on "cpu" changes nothing.
 *
 * @param model  The model (borrowed for the call; keeps the folder's path). Must not be NULL.
 * @param device_map_json  Accelerate's device map JSON (read during the call). Must not be NULL.
 * @param options_json  JSON object as above, or NULL.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for a malformed map or options, tensors the map does not cover, or
 *         disk modules without "offload_dir"; ACCEL_ERR_NOT_FOUND / ACCEL_ERR_DATA_LOSS for a folder that lacks a
 *         disk tensor or is damaged (the file named); ACCEL_ERR_FAILED_PRECONDITION for a model that is prepared,
 *         already dispatched or partitioned; ACCEL_ERR_UNIMPLEMENTED for GPU targets.
 * Ownership: borrows its arguments for the call. The folder must stay unchanged while the model is dispatched.
 * Threads: as the model's other functions.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_dispatch(accel_model_t *model, const char *device_map_json,
                                                              const char *options_json) ACCEL_NOEXCEPT;

/**
 * Accelerate's load_checkpoint_and_dispatch: loads @p checkpoint_path (a file or folder that
 * accel_model_load_checkpoint reads) into @p model, then dispatches it with "device_map".
 *
 * @p options_json (NULL = defaults): "device_map" (a map object as for accel_model_dispatch, or a strategy:
 * "auto", "balanced", "balanced_low_0" or "sequential", the map accel_model_infer_auto_device_map computes before
 * loading, with "max_memory" and "no_split_module_classes" as there; absent: loaded only), "offload_folder" (or
 * "offload_dir"), "offload_buffers", "dtype" (floating-point values converted to it while loading; also the
 * strategy's size unit), "strict" (false), "offload_state_dict" (accepted; accel loads tensor by tensor anyway),
 * "execution_device" ("cpu"). The model may be empty (built with "empty_init": true).
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param checkpoint_path  The checkpoint (read during the call). Must not be NULL or empty.
 * @param options_json  JSON object as above, or NULL.
 * @return as accel_model_load_checkpoint and accel_model_dispatch.
 * Ownership: borrows its arguments for the call.
 * Threads: as the model's other functions.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_load_checkpoint_and_dispatch(accel_model_t *model,
                                                                                  const char *checkpoint_path,
                                                                                  const char *options_json) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_DISPATCH_H */
