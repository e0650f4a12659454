/* accel/model.h - models: built from a JSON spec or loaded from TorchScript. */
#ifndef ACCEL_MODEL_H
#define ACCEL_MODEL_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Build a model from a JSON spec. Two forms:
 *   {"type": "mlp", "widths": [in, h1, ..., out], "activation": "relu"|"gelu"|"tanh"|"sigmoid",
 *    "dropout": 0.0, "bias": true}
 *   {"type": "sequential", "layers": [{"type": "linear", "in_features": 4, "out_features": 8}, ...]}
 * Layer types: linear, conv2d, relu, gelu, tanh, sigmoid, dropout, layer_norm, batch_norm (1d/2d by
 * "dims"), embedding, flatten, and transformer_encoder_layer: PyTorch's nn.TransformerEncoderLayer
 * (post-norm) with {"d_model" (required), "nhead" (required, divides d_model), "dim_feedforward": 2048,
 * "dropout": 0.1, "activation": "relu"|"gelu", "batch_first": false}; its input is (seq, batch, d_model),
 * or (batch, seq, d_model) with batch_first. Parameters are initialised from LibTorch's default
 * generator, so accel_random_set_seed() first makes them reproducible. Models prepared with
 * mixed_precision "fp8" run their linear layers through accel's emulated FP8 path (only models from
 * this function; a TorchScript model is ACCEL_ERR_UNIMPLEMENTED at prepare time).
 * Errors name the JSON path, e.g. `layers[2].out_features: expected an integer >= 1, got -3`.
 * Ownership: free *out with accel_model_free().
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_create_from_json(const char *spec_json,
                                                                      accel_model_t **out) ACCEL_NOEXCEPT;

/**
 * Load a TorchScript module saved with `torch.jit.save` (Python) or `torch::jit::save`.
 * @return ACCEL_ERR_NOT_FOUND if the file does not exist; ACCEL_ERR_DATA_LOSS if it cannot be read.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_create_from_torchscript(const char *path,
                                                                             accel_model_t **out) ACCEL_NOEXCEPT;

/** Frees the handle. NULL is fine; any order relative to optimizers and accelerators is safe. */
ACCEL_API void accel_model_free(accel_model_t *model) ACCEL_NOEXCEPT;

/**
 * Run the model on @p input. Prepared models run under the accelerator's autocast when mixed precision
 * is on, and return fp32 outputs.
 * Ownership: borrows @p input; free *out with accel_tensor_free().
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_forward(accel_model_t *model, const accel_tensor_t *input,
                                                             accel_tensor_t **out) ACCEL_NOEXCEPT;

/** Switch to training mode (dropout and batch-norm statistics active), as `model.train()`. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_train(accel_model_t *model) ACCEL_NOEXCEPT;
/** Switch to evaluation mode, as `model.eval()`. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_eval(accel_model_t *model) ACCEL_NOEXCEPT;
/** Whether the model is in training mode. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_is_training(const accel_model_t *model,
                                                                 bool *out) ACCEL_NOEXCEPT;

/** Number of parameters (named_parameters() entries). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_num_parameters(const accel_model_t *model,
                                                                        size_t *out) ACCEL_NOEXCEPT;
/** Total number of parameter elements. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_parameter_numel(const accel_model_t *model,
                                                                         int64_t *out) ACCEL_NOEXCEPT;
/**
 * Name of parameter @p index, in named_parameters() order ("0.weight", "fc1.bias", ...).
 * Ownership: *out is borrowed and valid until the model is freed.
 * @return ACCEL_ERR_OUT_OF_RANGE if index >= accel_model_get_num_parameters().
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_parameter_name(const accel_model_t *model, size_t index,
                                                                        const char **out) ACCEL_NOEXCEPT;
/**
 * A copy of the parameter or buffer @p name (a state-dict key).
 * @return ACCEL_ERR_NOT_FOUND for an unknown key. Free *out with accel_tensor_free().
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_tensor(const accel_model_t *model, const char *name,
                                                                accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * A copy of the gradient of parameter @p name; *out is NULL (and ACCEL_OK) when it has none.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_gradient(const accel_model_t *model, const char *name,
                                                                  accel_tensor_t **out) ACCEL_NOEXCEPT;

/** Number of state-dict entries (parameters then buffers). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_state_dict_size(const accel_model_t *model,
                                                                         size_t *out) ACCEL_NOEXCEPT;
/** State-dict key @p index. Ownership: borrowed, valid until the model is freed. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_state_dict_key(const accel_model_t *model, size_t index,
                                                                        const char **out) ACCEL_NOEXCEPT;
/**
 * Load tensors into the model's state dict (copying values; dtype is converted, shape must match).
 * @param keys,tensors Parallel arrays of @p count entries.
 * @param strict When true, every state-dict key must be given and no unknown key may appear
 *               (ACCEL_ERR_INVALID_ARGUMENT naming the keys); when false, unknown and missing keys
 *               are skipped.
 * Nothing is changed unless every entry is valid.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_load_state_dict(accel_model_t *model, const char *const *keys,
                                                                     const accel_tensor_t *const *tensors,
                                                                     size_t count, bool strict) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_MODEL_H */
