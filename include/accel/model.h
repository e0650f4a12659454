/** @file
 * models: built from a JSON spec or loaded from TorchScript. */
#ifndef ACCEL_MODEL_H
#define ACCEL_MODEL_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Build a model from a JSON spec. Three forms:
 *   {"type": "mlp", "widths": [in, h1, ..., out], "activation": "relu"|"gelu"|"tanh"|"sigmoid",
 *    "dropout": 0.0, "bias": true}
 *   {"type": "sequential", "layers": [{"type": "linear", "in_features": 4, "out_features": 8}, ...]}
 * Layer types: linear, conv2d, relu, gelu, tanh, sigmoid, dropout, layer_norm, batch_norm (1d/2d by
 * "dims"), embedding, flatten, and transformer_encoder_layer: PyTorch's nn.TransformerEncoderLayer
 * (post-norm) with {"d_model" (required), "nhead" (required, divides d_model), "dim_feedforward": 2048,
 * "dropout": 0.1, "activation": "relu"|"gelu", "batch_first": false}; its input is (seq, batch, d_model),
 * or (batch, seq, d_model) with batch_first. Parameters are initialised from LibTorch's default
 * generator, so accel_random_set_seed() first makes them reproducible.
 *
 *   {"type": "gpt", ...}: a GPT-2 decoder as Hugging Face's GPT2LMHeadModel, with its config keys and
 *   defaults: "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12
 *   (divides n_embd), "n_inner": null (4 * n_embd), "activation_function": "gelu_new" ("gelu_new" and
 *   "gelu_pytorch_tanh" are GELU's tanh approximation; "gelu", "relu", "silu"), "resid_pdrop": 0.1,
 *   "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
 *   "scale_attn_weights": true, "scale_attn_by_inverse_layer_idx": false, "tie_word_embeddings": true;
 *   and accel's "activation_checkpointing": false (true: each block's activations are recomputed in
 *   backward, with the same dropout masks, instead of being kept). Input: token ids [B, T] (or [T]),
 *   int64 or int32, T <= n_positions; output: logits [B, T, vocab_size]. Parameters are named and shaped
 *   as HF's (transformer.wte.weight, transformer.h.0.attn.c_attn.weight [n_embd, 3 n_embd] - GPT-2's
 *   Conv1D weights are [in, out] - ..., transformer.ln_f.bias) and initialised as HF initialises them
 *   (N(0, initializer_range), c_proj weights N(0, initializer_range / sqrt(2 n_layer)), biases 0,
 *   layer norms 1/0). With tie_word_embeddings the head is transformer.wte.weight: one parameter,
 *   which the state-dict key "lm_head.weight" also names when loading or reading; untied, lm_head.weight
 *   is a parameter of its own. accel_model_load_checkpoint reads GPT-2 files as HF writes them: with
 *   or without the "transformer." prefix, with or without lm_head.weight, and skipping the attention
 *   mask buffers (h.N.attn.bias, h.N.attn.masked_bias) older transformers versions stored. Each block
 *   transformer.h.N is a unit of type "gpt_block" for wrap policies. mixed_precision "fp8" is not
 *   supported for gpt models (ACCEL_ERR_UNIMPLEMENTED at prepare time).
 *
 *   {"type": "llama", ...}: the Llama family (Llama, Mistral, Qwen2) as transformers' LlamaForCausalLM /
 *   MistralForCausalLM / Qwen2ForCausalLM, with their config keys by HF name and the defaults of the config
 *   class "model_type" names ("llama" when absent, "mistral", "qwen2"): "vocab_size", "hidden_size",
 *   "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads" (grouped-query
 *   attention), "head_dim", "hidden_act" ("silu"), "rms_norm_eps", "rope_theta", "rope_scaling" (null or
 *   {"rope_type": "linear" | "dynamic" | "llama3", "factor", ...}), "max_position_embeddings",
 *   "attention_bias", "mlp_bias", "tie_word_embeddings", "sliding_window" (mistral; qwen2 with
 *   "use_sliding_window" and "max_window_layers"), "attention_dropout", "pad_token_id", "initializer_range",
 *   and accel's "activation_checkpointing". config.json's keys that change nothing here (torch_dtype,
 *   architectures, bos/eos_token_id, use_cache, transformers_version, pretraining_tp 1) are accepted, so a
 *   config.json with "type": "llama" added is a spec; other keys are refused by name. Parameters are HF's
 *   (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight,
 *   which names the embedding when tied); each decoder layer is a unit of type "LlamaDecoderLayer"
 *   ("MistralDecoderLayer", "Qwen2DecoderLayer"). Input and output as for "gpt". Details:
 *   docs/guides/fine-tuning.md.
 * Models prepared with
 * mixed_precision "fp8" run their linear layers through accel's emulated FP8 path (only models from
 * this function; a TorchScript model is ACCEL_ERR_UNIMPLEMENTED at prepare time).
 * Errors name the JSON path, e.g. `layers[2].out_features: expected an integer >= 1, got -3`.
 * Ownership: free *out with accel_model_free().
 *
 * @param spec_json  The model spec, a JSON object as above (read during the call). Must not be NULL.
 * @param out  Receives a new model handle, owned by the caller, who frees it with accel_model_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_create_from_json(const char *spec_json,
                                                                      accel_model_t **out) ACCEL_NOEXCEPT;

/**
 * Load a TorchScript module saved with `torch.jit.save` (Python) or `torch::jit::save`.
 * @return ACCEL_ERR_NOT_FOUND if the file does not exist; ACCEL_ERR_DATA_LOSS if it cannot be read.
 *
 * @param path  The TorchScript file (read during the call). Must not be NULL.
 * @param out  Receives a new model handle, owned by the caller, who frees it with accel_model_free(); NULL on
 *             failure. Must not be NULL.
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_create_from_torchscript(const char *path,
                                                                             accel_model_t **out) ACCEL_NOEXCEPT;

/**
 * Build a model from a Hugging Face folder (transformers' PreTrainedModel.from_pretrained, no download):
 * config.json's model_type picks the spec ("gpt2" -> {"type": "gpt"} with GPT2Config's keys; "llama",
 * "mistral", "qwen2" -> {"type": "llama"}; anything else is ACCEL_ERR_UNIMPLEMENTED naming it), then the
 * weights are loaded from model.safetensors.index.json with its shards, model.safetensors,
 * pytorch_model.bin.index.json with its shards, or pytorch_model.bin (the first present, in that order).
 * The parameters take the dtype the weights are stored in (transformers' torch_dtype "auto").
 * While an accelerator with deepspeed_plugin.zero3_init_flag lives, the model is built partitioned (as by
 * accel_model_create_from_json) and each process copies only its slice of each parameter out of the mapped
 * safetensors files (a pytorch_model.bin is read whole); the weights are then float32.
 *
 * @param path  The folder (read during the call). Must not be NULL.
 * @param options_json  NULL or {"strict": true, "torch_dtype": "auto" | "float32" | "bfloat16" | "float16" |
 *                      "float64", "frozen": [...], "lora": {...}, "adapter": "<folder>"}: strict=false loads
 *                      what matches and reports the rest (printed on the main process;
 *                      accel_model_from_pretrained_with_report() returns it); "frozen" and "lora" are model
 *                      options handed on into the spec (new LoRA adapters are not expected in the folder);
 *                      "adapter" puts a PEFT LoRA adapter folder (adapter_config.json +
 *                      adapter_model.safetensors, as PeftModel.from_pretrained reads it) on the loaded model.
 * @param out  Receives a new model handle, owned by the caller, who frees it with accel_model_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_NOT_FOUND (no folder, no config.json, no weights, a shard the index names is
 *         absent); ACCEL_ERR_INVALID_ARGUMENT for bad JSON, a config key the model refuses (named), a tensor of
 *         the wrong shape, and (strict) a missing or unexpected tensor, each naming the tensor and its file;
 *         ACCEL_ERR_DATA_LOSS for a damaged weights or index file; ACCEL_ERR_UNIMPLEMENTED for an unsupported
 *         model_type.
 * Ownership: borrows its arguments for the call; the caller owns what *out receives.
 * Threads: any thread; collective (every process, the same folders in the same order) under zero3_init_flag.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_from_pretrained(const char *path, const char *options_json,
                                                                     accel_model_t **out) ACCEL_NOEXCEPT;

/**
 * accel_model_from_pretrained(), also returning what did not match as JSON, as
 * accel_model_load_checkpoint_with_report() does: {"missing_keys": [...], "unexpected_keys": [...],
 * "tied_keys": [...]}.
 *
 * @param path  The folder, as for accel_model_from_pretrained(). Must not be NULL.
 * @param options_json  NULL or options, as for accel_model_from_pretrained().
 * @param out  Receives a new model handle, owned by the caller, who frees it with accel_model_free(); NULL on
 *             failure. Must not be NULL.
 * @param out_report  Receives the JSON (free with accel_string_free()); NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; the caller owns what *out and *out_report receive.
 * Threads: as accel_model_from_pretrained().
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_from_pretrained_with_report(const char *path,
                                                                                 const char *options_json,
                                                                                 accel_model_t **out,
                                                                                 char **out_report) ACCEL_NOEXCEPT;

/**
 * Write a Hugging Face folder that transformers' from_pretrained (and accel_model_from_pretrained()) loads:
 * config.json (with torch_dtype) and the weights, as model.safetensors or shards of at most max_shard_size
 * with model.safetensors.index.json (pytorch_model.bin with safe_serialization false). A prepared model is
 * gathered whole on the main process by its accelerator under every parallel mode (DDP, FSDP, DeepSpeed):
 * then every process calls this, as with accel_accelerator_save_model(), and the main process writes.
 *
 * @param model  A "gpt" or "llama" model (others have no config.json: ACCEL_ERR_FAILED_PRECONDITION).
 *               Must not be NULL.
 * @param path  The folder, created if needed (read during the call). Must not be NULL.
 * @param options_json  NULL or {"max_shard_size": "10GB", "safe_serialization": true, "adapter_only": false,
 *                      "merge": false}: for a model with LoRA adapters, adapter_only writes PEFT's adapter folder
 *                      instead (adapter_model.safetensors under PEFT's key names + adapter_config.json), merge
 *                      the weights with the adapters merged in (W + scaling B A) under the base model's names.
 * @return ACCEL_OK; ACCEL_ERR_FAILED_PRECONDITION (no config; the preparing accelerator was freed; a model
 *         built partitioned and not prepared; adapter_only or merge without adapters); ACCEL_ERR_ALREADY_EXISTS
 *         when @p path is a file; ACCEL_ERR_INVALID_ARGUMENT for adapter_only and merge together.
 * Ownership: borrows its arguments for the call.
 * Threads: same rules as the owning accelerator.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_save_pretrained(accel_model_t *model, const char *path,
                                                                     const char *options_json) ACCEL_NOEXCEPT;

/**
 * Frees the handle. NULL is fine; any order relative to optimizers and accelerators is safe.
 *
 * @param model  The handle to free, or NULL (then nothing happens).
 * Ownership: takes @p model: it must not be used after the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_API void accel_model_free(accel_model_t *model) ACCEL_NOEXCEPT;

/**
 * Run the model on @p input. Prepared models run under the accelerator's autocast when mixed precision
 * is on, and return fp32 outputs.
 * Ownership: borrows @p input; free *out with accel_tensor_free().
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param input  The input batch (borrowed). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_forward(accel_model_t *model, const accel_tensor_t *input,
                                                             accel_tensor_t **out) ACCEL_NOEXCEPT;

/**
 * accel_model_forward() without recording the autograd graph, as under `torch.no_grad()`: for evaluation and
 * inference. Eval mode alone (accel_model_eval) does not do this, as in PyTorch: it switches dropout and
 * batch-norm statistics off but a forward still keeps every activation for a backward. The output has no
 * gradient history (a backward through it fails); a sharded model gathers its parameters for the forward and
 * returns to its shards right after it, as FSDP does without a backward.
 * Ownership: borrows @p input; free *out with accel_tensor_free().
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param input  The input batch (borrowed). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_forward_no_grad(accel_model_t *model, const accel_tensor_t *input,
                                                                     accel_tensor_t **out) ACCEL_NOEXCEPT;

/**
 * Switch to training mode (dropout and batch-norm statistics active), as `model.train()`.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_train(accel_model_t *model) ACCEL_NOEXCEPT;
/**
 * Switch to evaluation mode, as `model.eval()`.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_eval(accel_model_t *model) ACCEL_NOEXCEPT;
/**
 * Whether the model is in training mode.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_is_training(const accel_model_t *model,
                                                                 bool *out) ACCEL_NOEXCEPT;

/**
 * Number of parameters (named_parameters() entries).
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_num_parameters(const accel_model_t *model,
                                                                        size_t *out) ACCEL_NOEXCEPT;
/**
 * Total number of parameter elements.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_parameter_numel(const accel_model_t *model,
                                                                         int64_t *out) ACCEL_NOEXCEPT;
/**
 * Name of parameter @p index, in named_parameters() order ("0.weight", "fc1.bias", ...).
 * Ownership: *out is borrowed and valid until the model is freed.
 * @return ACCEL_ERR_OUT_OF_RANGE if index >= accel_model_get_num_parameters().
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param index  0 ... accel_model_get_num_parameters() - 1.
 * @param out  Receives the name (borrowed, see Ownership); NULL on failure. Must not be NULL.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_parameter_name(const accel_model_t *model, size_t index,
                                                                        const char **out) ACCEL_NOEXCEPT;
/**
 * A copy of the parameter or buffer @p name (a state-dict key).
 * @return ACCEL_ERR_NOT_FOUND for an unknown key. Free *out with accel_tensor_free().
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param name  State-dict key (read during the call). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_tensor(const accel_model_t *model, const char *name,
                                                                accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * A copy of the gradient of parameter @p name; *out is NULL (and ACCEL_OK) when it has none.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param name  Parameter name (read during the call). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_gradient(const accel_model_t *model, const char *name,
                                                                  accel_tensor_t **out) ACCEL_NOEXCEPT;

/**
 * Freeze or unfreeze parameters (PyTorch's `param.requires_grad_(False)`, as fine-tuning does): every parameter
 * whose name matches the shell-style @p name_glob (fnmatch: `*` matches any characters, dots included, as in an
 * optimizer's "param_groups"). A frozen parameter gets no gradient (one it had is dropped), no optimizer state,
 * no DDP bucket and no sharded gradient, is left out of clip_grad_norm's total, keeps its bytes through
 * training, and is still saved and loaded with the model. The spec key "frozen" (accel_model_create_from_json)
 * does the same at creation.
 *
 * Freeze before accel_optimizer_create: the optimizer and the accelerator's wrappers decide what trains when
 * they are built, so a call while an optimizer over the model lives, or once the model is prepared, is
 * ACCEL_ERR_FAILED_PRECONDITION (free that optimizer, or free_memory the accelerator, first).
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param name_glob  Parameter name or glob (read during the call). Must not be NULL; a glob matching no parameter
 *                   is ACCEL_ERR_INVALID_ARGUMENT naming it.
 * @param requires_grad  false freezes, true makes trainable again.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_set_requires_grad(accel_model_t *model, const char *name_glob,
                                                                       bool requires_grad) ACCEL_NOEXCEPT;
/**
 * Whether parameter @p name trains (false: frozen by accel_model_set_requires_grad or the spec's "frozen").
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param name  Parameter name (read during the call). Must not be NULL; ACCEL_ERR_NOT_FOUND if the model has no
 *              such parameter.
 * @param out  Receives the result (false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_requires_grad(const accel_model_t *model, const char *name,
                                                                       bool *out) ACCEL_NOEXCEPT;
/**
 * Quantizes the model's linear layers in place with bitsandbytes' formats, as Accelerate's load_and_quantize_model
 * does with a BnbQuantizationConfig (docs/guides/big-models.md, "Quantization").
 *
 * @p bnb_config_json holds BnbQuantizationConfig's keys: "load_in_8bit" / "load_in_4bit" (exactly one true),
 * "llm_int8_threshold" (6.0; LLM.int8's outlier threshold), "bnb_4bit_quant_type" ("fp4" or "nf4"),
 * "bnb_4bit_use_double_quant" (false), "bnb_4bit_compute_dtype" ("fp16", "bf16" or "fp32"; "fp16" is refused on
 * the CPU, where LibTorch 1.13 has no float16 matmul), "skip_modules" (default: Accelerate's choice, the tied
 * modules and the head) and "keep_in_fp32_modules". Unknown keys are ACCEL_ERR_INVALID_ARGUMENT naming them.
 * "torch_dtype" ("float32", "bfloat16"; "float16" is ACCEL_ERR_UNIMPLEMENTED on the CPU): the dtype of the
 * floating-point tensors that are not quantized (keep_in_fp32_modules: float32), applied before quantizing.
 *
 * "weights_location" (load_and_quantize_model's argument, given here as a key): a checkpoint file or folder
 * loaded while quantizing, each quantized layer's weight read and quantized one at a time, so that a model built
 * with "empty_init" is quantized without its float weights ever being in memory together. A checkpoint that holds
 * quantized tensors already (a quantized model's save_pretrained folder, or transformers' bitsandbytes layout) is
 * loaded as it is. Without it a model still on the meta device is ACCEL_ERR_FAILED_PRECONDITION (as Accelerate's
 * RuntimeError); a tensor missing from the checkpoint, one the model lacks or of another shape is
 * ACCEL_ERR_INVALID_ARGUMENT naming it. With "weights_location" only: "device_map" (a map as accel_model_dispatch
 * takes, or "auto" / "balanced" / "balanced_low_0" / "sequential", inferred on the quantized sizes with
 * "max_memory" and "no_split_module_classes"), "offload_folder" (where the "disk" modules' tensors are written,
 * quantized, as they load) and "offload_state_dict" (accepted: loading is tensor by tensor already); the model is
 * then dispatched as accel_model_dispatch does. GPU targets are ACCEL_ERR_UNIMPLEMENTED.
 *
 * Each converted layer's "<module>.weight" parameter then holds the quantized weight, frozen: int8 [out, in] with
 * "<module>.SCB" (8-bit), or packed uint8 [out * in / 2, 1] with "<module>.weight.absmax", ".weight.quant_map",
 * (".weight.nested_absmax", ".weight.nested_quant_map" with double quantization) and
 * ".weight.quant_state.bitsandbytes__<type>" (4-bit), the keys bitsandbytes and transformers save; these buffers
 * are appended to the state dict, so names returned before by accel_model_get_state_dict_key are invalidated.
 *
 * A model created with LoRA adapters (the spec's "lora") has the base layers under them quantized: the adapters
 * stay float32 and train over the quantized base (QLoRA).
 *
 * @param model  The model (borrowed for the call). Must not be NULL; not prepared yet (else
 *               ACCEL_ERR_FAILED_PRECONDITION) and not quantized yet.
 * @param bnb_config_json  JSON object (read during the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message());
 *         ACCEL_ERR_UNIMPLEMENTED for a TorchScript model.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_quantize(accel_model_t *model,
                                                              const char *bnb_config_json) ACCEL_NOEXCEPT;

/**
 * Number of state-dict entries (parameters then buffers).
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_state_dict_size(const accel_model_t *model,
                                                                         size_t *out) ACCEL_NOEXCEPT;
/**
 * State-dict key @p index. Ownership: borrowed, valid until the model is freed.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param index  0 ... accel_model_get_state_dict_size() - 1.
 * @param out  Receives the key (borrowed, see Ownership); NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_get_state_dict_key(const accel_model_t *model, size_t index,
                                                                        const char **out) ACCEL_NOEXCEPT;
/**
 * Load tensors into the model's state dict (copying values; dtype is converted, shape must match).
 * @param keys,tensors Parallel arrays of @p count entries.
 * @param strict When true, every state-dict key must be given and no unknown key may appear
 *               (ACCEL_ERR_INVALID_ARGUMENT naming the keys); when false, unknown and missing keys
 *               are skipped.
 * Nothing is changed unless every entry is valid.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param count  Number of entries of @p keys and @p tensors.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_load_state_dict(accel_model_t *model, const char *const *keys,
                                                                     const accel_tensor_t *const *tensors,
                                                                     size_t count, bool strict) ACCEL_NOEXCEPT;

/**
 * Generate tokens with a model of type "gpt" or "llama" (Hugging Face's model.generate for a decoder-only model):
 * each step appends one token per row, chosen from the last position's logits greedily or by sampling,
 * using a KV cache so a step runs the new token only.
 * @param input_ids Prompt token ids, int64 [B, T] or [T] (T >= 1).
 * @param options_json NULL or {"max_new_tokens": 20, "do_sample": false, "temperature": 1.0 (> 0),
 *        "top_k": 50 (0: the whole vocabulary), "seed": \<uint64\>, "eos_token_id": null, "use_cache": true}.
 *        Greedy (do_sample false) takes the argmax; sampling divides the logits by temperature, keeps the
 *        top_k scores and draws from their softmax with a generator of its own seeded with "seed" (without
 *        "seed", one is drawn from LibTorch's default generator), so the same seed gives the same text and
 *        the process's random state is not consumed. A row that produced eos_token_id repeats it; the
 *        call stops early when every row has. For "gpt", T + max_new_tokens must not exceed n_positions.
 * @param out Receives int64 [B, T + n] (or [T + n]): the prompt followed by n <= max_new_tokens tokens.
 * Runs without gradients and without dropout (the model's train/eval mode is left as it was); a prepared
 * model runs under its accelerator's autocast.
 * @return ACCEL_ERR_UNIMPLEMENTED for models that are neither "gpt" nor "llama"; ACCEL_ERR_INVALID_ARGUMENT naming the
 *         argument or JSON key; ACCEL_ERR_OUT_OF_RANGE for token ids outside [0, vocab_size).
 * Ownership: borrows @p model and @p input_ids; free *out with accel_tensor_free().
 * Threads: not while the model is used elsewhere.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_generate(accel_model_t *model, const accel_tensor_t *input_ids,
                                                              const char *options_json,
                                                              accel_tensor_t **out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_MODEL_H */
