/** @file
 * save_state / load_state, save_model, loading weights, registered objects. */
#ifndef ACCEL_CHECKPOINT_H
#define ACCEL_CHECKPOINT_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Save the accelerator's state in Accelerate's checkpoint layout (Accelerator.save_state):
 * model.safetensors (model_1.safetensors, ... for further prepared models), optimizer.bin,
 * scheduler.bin, dl_state_dict.bin (each prepared data loader's position), scaler.pt (when a gradient
 * scaler is on), random_states_{rank}.pkl (accumulate()'s step and the CPU generator) and
 * custom_checkpoint_{i}.pkl for registered objects. The .bin/.pkl/.pt files are torch.save archives
 * that Python's torch.load reads.
 *
 * The folder is written as "<parent>/.<name>.accel-tmp", every file and the folder are fsynced, and it
 * is then renamed into place (an existing folder is swapped atomically), so a crash never leaves a
 * half-written checkpoint under the final name. With project_config.automatic_checkpoint_naming the
 * folder is project_dir/checkpoints/checkpoint_{iteration} and @p output_dir is ignored; with
 * total_limit, the oldest checkpoints are deleted after the new one is complete. Every save increments
 * project_config.iteration.
 *
 * @param accelerator Must not be NULL.
 * @param output_dir  UTF-8 folder ("~" is expanded); may be NULL only with automatic naming.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for a NULL/empty @p output_dir without automatic naming;
 *         ACCEL_ERR_ALREADY_EXISTS if the automatic target exists or @p output_dir is a file;
 *         ACCEL_ERR_PERMISSION_DENIED / ACCEL_ERR_RESOURCE_EXHAUSTED from the file system.
 *
 * Ownership: borrows everything. Threads: same rules as the accelerator; collective (all ranks call it).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_save_state(accel_accelerator_t *accelerator,
                                                                      const char *output_dir) ACCEL_NOEXCEPT;
/**
 * Load state saved by accel_accelerator_save_state() (Accelerator.load_state) into everything the
 * accelerator prepared and registered, in preparation order. Every file is read and validated before
 * anything changes, so a damaged checkpoint (ACCEL_ERR_DATA_LOSS naming the file and the rule broken)
 * leaves the training state as it was. Afterwards each prepared data loader continues with the next
 * unseen batch of the saved pass, and the CPU generator and accumulate()'s step continue, so training
 * resumes bit for bit. Model weights load strictly (see accel_accelerator_load_state_with_options).
 *
 * @param accelerator Must not be NULL.
 * @param input_dir   Folder to load; NULL loads the newest automatic checkpoint
 *                    (project_dir/checkpoints, highest number; unfinished ".accel-tmp" folders are
 *                    never taken) and requires automatic naming.
 * @return ACCEL_OK; ACCEL_ERR_NOT_FOUND if the folder, a file or any checkpoint is missing;
 *         ACCEL_ERR_DATA_LOSS for a corrupt file; ACCEL_ERR_INVALID_ARGUMENT when shapes or keys do
 *         not fit the prepared objects; ACCEL_ERR_FAILED_PRECONDITION when the number of
 *         custom_checkpoint_{i}.pkl files differs from the number of registered objects.
 *
 * Ownership: borrows everything. Threads: same rules as the accelerator; collective.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_load_state(accel_accelerator_t *accelerator,
                                                                      const char *input_dir) ACCEL_NOEXCEPT;

/**
 * accel_accelerator_save_state() with options and the folder written.
 *
 * @param options_json NULL or a JSON object: {"safe_serialization": true} (false writes
 *                     pytorch_model.bin instead of model.safetensors), {"async": false}: true copies
 *                     the state into new host memory ("staging"; the checkpoint's size again, until
 *                     written) and returns; the files are written on a background thread while
 *                     training goes on, into the temporary folder, published when every process's
 *                     files are durable. Wait with accel_accelerator_wait_for_checkpoint() (the next
 *                     save_state and load_state, and accel_accelerator_free_memory() / _free(), wait
 *                     too); a failure of the background write is returned by that call.
 * @param out_dir      Receives the folder written (free with accel_string_free()); may be NULL when
 *                     not wanted.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param output_dir  Folder to write, as for accel_accelerator_save_state(); NULL with automatic checkpoint naming.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_save_state_with_options(accel_accelerator_t *accelerator,
                                                                                   const char *output_dir,
                                                                                   const char *options_json,
                                                                                   char **out_dir) ACCEL_NOEXCEPT;

/**
 * Wait for the asynchronous save_state ({"async": true}) in progress, if any, and return its status.
 * Afterwards the folder is published (visible under its name on every process) or, after a failure,
 * the temporary folder is removed and the previous checkpoints are untouched. Returns ACCEL_OK at once
 * when nothing is pending.
 *
 * @param accelerator Must not be NULL.
 * @return ACCEL_OK; the background write's failure (ACCEL_ERR_RESOURCE_EXHAUSTED for a full disk,
 *         ACCEL_ERR_PERMISSION_DENIED, ...; ACCEL_ERR_DEADLINE_EXCEEDED on the main process when another
 *         process's files did not arrive within the init_process_group timeout), reported once.
 *
 * Threads: same rules as the accelerator; collective when a save is pending (all ranks call it).
 *
 * Ownership: borrows its arguments for the call; keeps none of them.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_wait_for_checkpoint(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/**
 * accel_accelerator_load_state() with options and the folder loaded.
 *
 * @param options_json NULL or {"strict": true, "map_location": "cpu"}: strict=false skips missing and
 *                     unexpected weight keys; map_location is null, "cpu" or "on_device" (the same in
 *                     this CPU build).
 * @param out_dir      Receives the folder loaded (free with accel_string_free()); may be NULL.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param input_dir  Folder to load, as for accel_accelerator_load_state(); NULL with automatic checkpoint naming
 *                   (the newest checkpoint).
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_load_state_with_options(accel_accelerator_t *accelerator,
                                                                                   const char *input_dir,
                                                                                   const char *options_json,
                                                                                   char **out_dir) ACCEL_NOEXCEPT;

/**
 * Save a model's weights for inference (Accelerator.save_model): model.safetensors, or shards
 * model-00001-of-0000N.safetensors plus model.safetensors.index.json ({"metadata": {"total_size"},
 * "weight_map"}) when they exceed max_shard_size. Tensors sharing storage (tied weights) are saved once.
 * Only the main process writes.
 *
 * @param options_json NULL or {"max_shard_size": "10GB" | "200MB" | \<bytes\>, "safe_serialization": true}
 *                     (false: pytorch_model.bin / pytorch_model-0000i-of-0000N.bin + .bin.index.json).
 * @return ACCEL_ERR_ALREADY_EXISTS if @p save_directory is a file; ACCEL_ERR_FAILED_PRECONDITION if
 *         @p model was prepared by another accelerator.
 * Ownership: borrows everything.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  The model whose weights are saved (borrowed). Must not be NULL.
 * @param save_directory  Folder to write into (created if missing). Must not be NULL.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_save_model(accel_accelerator_t *accelerator,
                                                                      const accel_model_t *model,
                                                                      const char *save_directory,
                                                                      const char *options_json) ACCEL_NOEXCEPT;

/**
 * Load weights into a model (accelerate.utils.load_checkpoint_in_model): @p path is a .safetensors
 * file, a torch.save file of a state dict, or a folder holding model.safetensors.index.json /
 * pytorch_model.bin.index.json (every shard it lists, in sorted order), model.safetensors or
 * pytorch_model.bin. Values are converted to each parameter's dtype.
 *
 * @param options_json NULL or {"strict": false, "dtype": null | "float32" | "float64" | "float16" |
 *                     "bfloat16"}: strict=true requires exactly the model's keys; dtype first rounds
 *                     floating-point weights through that type.
 * Not strict (the default, as Accelerate's), what did not match is printed as a warning on the main process
 * (rank 0 of the launcher's environment): the model's keys the file lacks, the file's keys the model lacks,
 * and a file key that was loaded into a tied tensor under another name (e.g. "lm_head.weight" into the token
 * embedding a GPT ties it to, when the file has no entry of the embedding's own name).
 * accel_model_load_checkpoint_with_report() also returns it.
 * @return ACCEL_ERR_NOT_FOUND; ACCEL_ERR_DATA_LOSS for a corrupt file; ACCEL_ERR_INVALID_ARGUMENT for
 *         key or shape mismatches (nothing is changed then).
 * Ownership: borrows everything. Threads: not while the model is used elsewhere.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param path  File or folder to load (read during the call). Must not be NULL.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_load_checkpoint(accel_model_t *model, const char *path,
                                                                     const char *options_json) ACCEL_NOEXCEPT;

/**
 * accel_model_load_checkpoint(), also returning what did not match as JSON (PyTorch's _IncompatibleKeys, plus
 * tied tensors): {"missing_keys": [...], "unexpected_keys": [...], "tied_keys": [{"key": "lm_head.weight",
 * "loaded_into": "wte.weight"}]} (all empty when the file matched the model exactly).
 * @param out_report Must not be NULL; receives the JSON (free with accel_string_free()); NULL on failure.
 *
 * @param model  The model (borrowed for the call). Must not be NULL.
 * @param path  File or folder to load, as for accel_model_load_checkpoint(). Must not be NULL.
 * @param options_json  NULL or options, as for accel_model_load_checkpoint().
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_model_load_checkpoint_with_report(accel_model_t *model,
                                                                                 const char *path,
                                                                                 const char *options_json,
                                                                                 char **out_report) ACCEL_NOEXCEPT;

/**
 * Join sharded weights into one file (accelerate.utils.merge_fsdp_weights; the `accel merge-weights`
 * command calls this): @p checkpoint_dir is a save_model folder with model.safetensors.index.json (or
 * the index file), a save_state folder written with SHARDED_STATE_DICT, or its pytorch_model_fsdp_0/.
 * Safetensors output is joined at the byte level (every safetensors dtype passes through, header as the
 * reference writer makes it); pickle output is a torch.save archive of the state dict (an OrderedDict of
 * tensors), as Accelerate writes pytorch_model.bin. Written to a temporary sibling, fsynced and renamed.
 *
 * @param checkpoint_dir UTF-8 path ("~" is expanded).
 * @param output_path    A folder (created; model.safetensors or pytorch_model.bin is written into it), or a
 *                       file name ending in ".safetensors" (safe) or ".bin" (pickle).
 * @param options_json   NULL or {"safe_serialization": true, "remove_checkpoint_dir": false}: the latter
 *                       deletes @p checkpoint_dir once the output is complete (refused when the output lies
 *                       inside it).
 * @param out_path       Receives the file written (free with accel_string_free()); may be NULL.
 * @param out_count      Receives the number of tensors written; may be NULL.
 * @return ACCEL_ERR_NOT_FOUND when there is no index or sharded folder; ACCEL_ERR_DATA_LOSS naming a
 *         damaged file (a missing or truncated rank file included); ACCEL_ERR_INVALID_ARGUMENT for an
 *         output name that does not fit the format, or a folder holding several models' weights;
 *         ACCEL_ERR_UNIMPLEMENTED for pickle shards as input, or pickle output of a dtype LibTorch 1.13 lacks.
 *
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_checkpoint_merge_weights(const char *checkpoint_dir,
                                                                        const char *output_path,
                                                                        const char *options_json, char **out_path,
                                                                        int64_t *out_count) ACCEL_NOEXCEPT;

/**
 * Save callback of an object registered for checkpointing: set *out_data / *out_len to the bytes to
 * store (the memory stays the caller's; it must stay valid until the callback returns to the library,
 * which copies it at once). Return ACCEL_OK, or any other status to make save_state fail with it.
 */
typedef accel_status_t (*accel_checkpoint_save_fn_t)(void *user_data, const uint8_t **out_data, size_t *out_len);
/** Load callback: receives the stored bytes (borrowed for the duration of the call). */
typedef accel_status_t (*accel_checkpoint_load_fn_t)(void *user_data, const uint8_t *data, size_t len);

/**
 * Register an object whose state is saved as custom_checkpoint_{index}.pkl (a pickled Python bytes
 * object) by save_state and handed back by load_state (Accelerator.register_for_checkpointing).
 *
 * @param save_fn,load_fn Must not be NULL. They run on the calling thread during save/load_state.
 * @param user_data        Passed to both callbacks; must stay valid while the accelerator lives.
 * @param out_index        Receives the object's index (0, 1, ... in registration order).
 * Ownership: borrows @p user_data.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_register_for_checkpointing(accel_accelerator_t *accelerator,
                                                                                      accel_checkpoint_save_fn_t save_fn,
                                                                                      accel_checkpoint_load_fn_t load_fn,
                                                                                      void *user_data,
                                                                                      int32_t *out_index) ACCEL_NOEXCEPT;

/**
 * Register a byte blob for checkpointing: save_state stores its current bytes and load_state replaces
 * them; read them with accel_accelerator_get_checkpointing_bytes().
 *
 * @param data,len  The initial bytes (copied; @p data may be NULL when @p len is 0).
 * @param out_index Receives the object's index.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_register_bytes_for_checkpointing(
    accel_accelerator_t *accelerator, const uint8_t *data, size_t len, int32_t *out_index) ACCEL_NOEXCEPT;

/**
 * A save_state / load_state pre-hook: called on every process with the checkpoint folder and the process
 * index. A save hook runs before save_state writes any file into the folder (the temporary folder save_state
 * publishes under its final name once every process wrote its files: a file the hook writes there becomes part
 * of the checkpoint); a load hook runs before load_state reads the folder it loads. Return ACCEL_OK, or another
 * status (a message may be set with accel_callback_set_error()) to make the call fail on every process with
 * that status, the message naming the hook by its handle.
 */
typedef accel_status_t (*accel_state_hook_fn_t)(void *user_data, const char *folder, int32_t process_index);
/** Called once when a registered hook is removed or its accelerator freed: the binding's release of user_data. */
typedef void (*accel_state_hook_release_fn_t)(void *user_data);

/**
 * Register a save_state pre-hook (Accelerator.register_save_state_pre_hook). Hooks run in registration order.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param hook         Must not be NULL. Runs on the thread calling save_state (also with {"async": true}).
 * @param release      Called with @p user_data when the hook is removed or the accelerator freed; may be NULL.
 * @param user_data    Passed to @p hook and @p release.
 * @param out_handle   Receives the hook's handle for accel_accelerator_remove_state_hook() (1, 2, ...).
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: keeps @p user_data until @p release. Threads: same rules as the accelerator.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_register_save_state_pre_hook(
    accel_accelerator_t *accelerator, accel_state_hook_fn_t hook, accel_state_hook_release_fn_t release, void *user_data,
    int64_t *out_handle) ACCEL_NOEXCEPT;
/**
 * Register a load_state pre-hook (Accelerator.register_load_state_pre_hook); as the save form. With automatic
 * checkpoint naming it runs for each folder load_state tries.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param hook         Must not be NULL.
 * @param release      Called with @p user_data when the hook is removed or the accelerator freed; may be NULL.
 * @param user_data    Passed to @p hook and @p release.
 * @param out_handle   Receives the hook's handle.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: keeps @p user_data until @p release. Threads: same rules as the accelerator.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_register_load_state_pre_hook(
    accel_accelerator_t *accelerator, accel_state_hook_fn_t hook, accel_state_hook_release_fn_t release, void *user_data,
    int64_t *out_handle) ACCEL_NOEXCEPT;
/**
 * Remove a save_state or load_state pre-hook (RemovableHandle.remove()); its release function runs now.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param handle       A handle a register call returned.
 * @return ACCEL_OK; ACCEL_ERR_NOT_FOUND for a handle not registered (or already removed).
 * Ownership: borrows its arguments for the call. Threads: same rules as the accelerator.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_remove_state_hook(accel_accelerator_t *accelerator,
                                                                             int64_t handle) ACCEL_NOEXCEPT;

/**
 * Accelerator.save for named tensors: writes them to @p path as one safetensors file (metadata {"format": "pt"},
 * readable by safetensors.torch.load_file), on the main process only; the other processes check the arguments
 * and return at once, as Accelerate's save (save_on_each_node false). Not collective: call
 * accel_accelerator_wait_for_everyone() before reading the file from another process. Tensors are saved as they
 * are (their dtype and shape; non-contiguous ones are copied).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param keys,tensors Parallel arrays of @p count entries: non-empty, unique names and tensors (borrowed).
 * @param count        Number of entries (0 writes a file with no tensor).
 * @param path         The file to write (its folder must exist). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: same rules as the accelerator.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_save(accel_accelerator_t *accelerator, const char *const *keys,
                                                                const accel_tensor_t *const *tensors, size_t count,
                                                                const char *path) ACCEL_NOEXCEPT;

/**
 * Accelerate's `accelerator.get_state_dict(model, unwrap=True)`: the state dict of @p model in memory, in one call:
 * its parameters, then its buffers, under the names accel_model_get_state_dict_key() lists (a LoRA model's
 * adapters as `<module>.lora_A.weight`; a tied weight under its parameter's name). The tensors are copies taken
 * now (training on does not change them), in the model's dtypes.
 *
 * A model sharded by fsdp_plugin (every sharding_strategy) or deepspeed_plugin (ZeRO 1-3) is gathered whole first
 * and given back to its shards before the call returns: FSDP's FULL_STATE_DICT (whatever state_dict_type says;
 * that governs save_state's files) and ZeRO-3's consolidated state dict. That makes the call collective for such
 * a model: every process calls it, in the same order as the other collectives. As in Accelerate, only process 0
 * then receives the tensors (FullStateDictConfig(rank0_only=True), DeepSpeed's rank-0 consolidation) and the
 * other processes an empty state dict; "rank0_only": false gives every process the whole state dict. A model
 * under DDP, ZeRO-1/2 or none: each process its own copy, nothing communicated. A model split by tensor
 * parallelism (parallelism_config.tp_size > 1): its split parameters gathered whole over the tp group (collective
 * there; every process receives the whole state dict unless "rank0_only": true), the vocabulary's padding rows
 * dropped, as save_model writes them. A model that is not prepared: its state dict as it is.
 *
 * @param accelerator   The accelerator (borrowed for the call). Must not be NULL.
 * @param model         A model prepared by @p accelerator, or one not prepared (borrowed). Must not be NULL.
 * @param options_json  NULL or {"unwrap": true, "rank0_only": null | true | false}: unwrap false gives the keys
 *                      as the wrapped module names them (DDP: "module." in front; FSDP's and DeepSpeed's keys are
 *                      the model's own either way, as in Accelerate); rank0_only null is Accelerate's choice
 *                      (true for a model sharded by fsdp_plugin or ZeRO-3, else false).
 * @param out           Receives a new state dict, owned by the caller, who frees it with accel_state_dict_free();
 *                      NULL on failure. Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT naming the JSON key; ACCEL_ERR_FAILED_PRECONDITION if @p model was
 *         prepared by another accelerator or is partitioned without being prepared (zero3_init_flag); a
 *         communication failure's status when gathering fails.
 * Ownership: borrows its arguments for the call; the caller owns *out.
 * Threads: same rules as the accelerator; collective for a sharded model.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_state_dict(accel_accelerator_t *accelerator,
                                                                          const accel_model_t *model,
                                                                          const char *options_json,
                                                                          accel_state_dict_t **out) ACCEL_NOEXCEPT;
/**
 * Number of entries of a state dict (0 for the empty one the processes other than 0 receive under rank0_only).
 *
 * @param state_dict  The state dict (borrowed). Must not be NULL.
 * @param out         Receives the count (0 on failure). Must not be NULL.
 * @return ACCEL_OK, or ACCEL_ERR_INVALID_ARGUMENT naming the NULL argument.
 * Ownership: borrows @p state_dict.
 * Threads: a state dict may be read from several threads at once; it must not be freed meanwhile.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_state_dict_get_count(const accel_state_dict_t *state_dict,
                                                                    size_t *out) ACCEL_NOEXCEPT;
/**
 * Key of entry @p index (entries keep the model's order: parameters, then buffers).
 *
 * @param state_dict  The state dict (borrowed). Must not be NULL.
 * @param index       0 ... count - 1 (ACCEL_ERR_OUT_OF_RANGE otherwise).
 * @param out         Receives the key, borrowed from @p state_dict: valid until accel_state_dict_free(). NULL on
 *                    failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: *out is borrowed from @p state_dict.
 * Threads: a state dict may be read from several threads at once; it must not be freed meanwhile.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_state_dict_get_key(const accel_state_dict_t *state_dict, size_t index,
                                                                  const char **out) ACCEL_NOEXCEPT;
/**
 * Tensor of entry @p index, as a new handle onto the state dict's copy (no further copy: the handle and the state
 * dict see the same memory). The handle stays valid after accel_state_dict_free().
 *
 * @param state_dict  The state dict (borrowed). Must not be NULL.
 * @param index       0 ... count - 1 (ACCEL_ERR_OUT_OF_RANGE otherwise).
 * @param out         Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free();
 *                    NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows @p state_dict; the caller owns *out.
 * Threads: a state dict may be read from several threads at once; it must not be freed meanwhile.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_state_dict_get_tensor(const accel_state_dict_t *state_dict,
                                                                     size_t index,
                                                                     accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * Free a state dict. NULL is fine. Tensor handles taken from it stay valid.
 *
 * @param state_dict  The state dict to free (may be NULL).
 * Ownership: takes @p state_dict; keys borrowed from it become invalid.
 * Threads: not while another thread reads the state dict.
 */
ACCEL_API void accel_state_dict_free(accel_state_dict_t *state_dict) ACCEL_NOEXCEPT;

/**
 * The current bytes of a blob registered with accel_accelerator_register_bytes_for_checkpointing().
 *
 * @return ACCEL_ERR_OUT_OF_RANGE for an unknown index; ACCEL_ERR_INVALID_ARGUMENT if the object at
 *         @p index was registered with callbacks.
 * Ownership: *out_data is borrowed; it stays valid until the next load_state or register call on this
 * accelerator, or until the accelerator is freed.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param index  Index returned by accel_accelerator_register_bytes_for_checkpointing().
 * @param out_data  Receives a pointer to the bytes (borrowed, see Ownership). Must not be NULL.
 * @param out_len  Receives the result (0 / false on failure). Must not be NULL.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_checkpointing_bytes(const accel_accelerator_t *accelerator,
                                                                                   int32_t index,
                                                                                   const uint8_t **out_data,
                                                                                   size_t *out_len) ACCEL_NOEXCEPT;

/**
 * ProjectConfiguration.iteration: the number the next automatic checkpoint gets.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_project_iteration(const accel_accelerator_t *accelerator,
                                                                                 int64_t *out) ACCEL_NOEXCEPT;

/**
 * Automatic resume: load the newest complete automatic checkpoint, if there is one. Call it once after
 * prepare; a program restarted by `accel launch --max_restarts N` (or any supervisor) then continues where
 * the last complete save left it, and a fresh start trains from the beginning - the same program both times.
 *
 * Loads as accel_accelerator_load_state(accelerator, NULL): the highest-numbered folder in
 * project_dir/checkpoints that is complete (temp folders of saves killed midway are never taken; a folder
 * whose files do not match the manifest save_state wrote gives way to the one before it), on the same or
 * another number of processes where load_state allows it; the next automatic checkpoint continues the
 * numbering. With no checkpoint at all nothing changes and *found_out is false: not an error.
 *
 * @param accelerator  Must not be NULL; its config must set project_config.automatic_checkpoint_naming (and
 *                     project_dir).
 * @param found_out    Receives true when a checkpoint was loaded, false on a fresh start (false on failure).
 *                     Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_FAILED_PRECONDITION without automatic naming, or when some processes see a
 *         checkpoint and others do not (project_dir must be shared); load_state's errors (ACCEL_ERR_DATA_LOSS when
 *         every checkpoint is damaged, ACCEL_ERR_INVALID_ARGUMENT when it does not fit the prepared objects).
 *
 * Ownership: borrows its arguments for the call. Threads: same rules as the accelerator; collective (all
 * ranks call it).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_load_latest_state(accel_accelerator_t *accelerator,
                                                                             bool *found_out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_CHECKPOINT_H */
