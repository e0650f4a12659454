/** @file
 * big models (Accelerate's big_modeling and utils/modeling.py): module sizes and device maps of a model, which
 * may be empty (built with "empty_init": true, its parameters on the meta device: accel_model_create_from_json,
 * accel_model_from_pretrained). Device maps are Accelerate's JSON: {"model.layers.0": 0, ..., "lm_head": "cpu",
 * "model.norm": "disk"} (module name -> GPU index, "cpu" or "disk"; "" names the whole model).
 * docs/guides/big-models.md. */
#ifndef ACCEL_BIG_MODELING_H
#define ACCEL_BIG_MODELING_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Accelerate's infer_auto_device_map: which device holds each module so that every GPU (by index), then the CPU,
 * then the disk takes modules in forward order up to its budget; the first GPU and the CPU keep room for the
 * largest layer still to place (an offloaded layer is brought there to run); a module that does not fit is split
 * into its children unless it has none or its class is in "no_split_module_classes"; tied weights stay with
 * their other end. The same inputs give the same map as Accelerate 0.24.1 on the same module tree.
 *
 * @p options_json (NULL = defaults): "max_memory" ({"0": "10GiB", "1": 10000000000, "cpu": "30GB", "disk": ...}:
 * bytes or Accelerate's size texts, GiB/MiB/KiB binary and GB/MB/KB decimal; default: the memory this machine has
 * available, for the CPU; required when a GPU is visible), "no_split_module_classes" (a class name or a list:
 * "GPT2Block", "LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", or accel's unit types such as
 * "gpt_block"), "dtype" (the dtype the weights will be loaded in, e.g. "float16" or "torch.bfloat16": sizes count
 * min(its size, each tensor's)), "balanced" (false; true: get_balanced_memory first, transformers'
 * device_map="auto"), "low_zero" (false; with balanced: "balanced_low_0"). Unknown keys are
 * ACCEL_ERR_INVALID_ARGUMENT naming them.
 *
 * @param model  The model (borrowed for the call; may be empty). Must not be NULL.
 * @param options_json  JSON object as above, or NULL.
 * @param map_json  Receives the device map as JSON, owned by the caller, who frees it with accel_string_free();
 *                  NULL on failure. Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for bad options (named); ACCEL_ERR_UNIMPLEMENTED for "mps", or no
 *         max_memory with a GPU visible.
 * Ownership: borrows its arguments for the call.
 * Threads: as the model's other functions.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_infer_auto_device_map(const accel_model_t *model,
                                                                           const char *options_json,
                                                                           char **map_json) ACCEL_NOEXCEPT;

/**
 * Accelerate's compute_module_sizes: the bytes of every module and tensor of @p model, as a JSON object
 * {"": total, "model": ..., "model.embed_tokens": ..., "model.embed_tokens.weight": ..., ...} in Accelerate's
 * order, with the largest layer (get_max_layer_size over the model's top-level modules) under no key of the
 * tree: the answer is {"sizes": {...}, "max_layer_size": bytes, "max_layer_names": [...]}.
 *
 * @p options_json (NULL = defaults): "dtype" (as for accel_model_infer_auto_device_map), "no_split_module_classes"
 * (what counts as one layer for max_layer_size).
 *
 * @param model  The model (borrowed for the call; may be empty). Must not be NULL.
 * @param options_json  JSON object as above, or NULL.
 * @param sizes_json  Receives the JSON, owned by the caller, who frees it with accel_string_free(); NULL on
 *                    failure. Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for bad options (named).
 * Ownership: borrows its arguments for the call.
 * Threads: as the model's other functions.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_compute_module_sizes(const accel_model_t *model,
                                                                          const char *options_json,
                                                                          char **sizes_json) ACCEL_NOEXCEPT;

/**
 * Accelerate's check_device_map: ACCEL_OK when @p device_map_json gives a device to every parameter and buffer
 * of @p model (an entry covers its module's tensors; the longest matching name wins).
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param device_map_json  A device map as above (read during the call). Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT naming what is wrong: malformed JSON, a value that is no GPU
 *         index / "cpu" / "disk" / "cuda:N", or the tensors no entry covers. Entries naming no module of the model
 *         are accepted, as Accelerate does (a map inferred on a transformers model may name its dropout modules).
 * Ownership: borrows its arguments for the call.
 * Threads: as the model's other functions.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_check_device_map(const accel_model_t *model,
                                                                      const char *device_map_json) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_BIG_MODELING_H */
