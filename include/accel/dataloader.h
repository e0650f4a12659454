/** @file
 * data loaders over in-memory tensors and files. */
#ifndef ACCEL_DATALOADER_H
#define ACCEL_DATALOADER_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * A loader over a tensor dataset: sample i is (features[i], labels[i]).
 *   {"batch_size": 1, "shuffle": false, "seed": \<uint64\>, "drop_last": false}
 * With "shuffle", each pass k uses the permutation randperm(n) of a generator seeded with seed + k
 * (Accelerate's SeedableRandomSampler), so passes are reproducible and identical on every rank. Without
 * "seed", the seed is drawn from LibTorch's default generator when the loader is created.
 * @param labels May be NULL (batches then have no labels). Its first dimension must equal the
 *               features' first dimension.
 * Ownership: the loader shares the tensors' memory (no copy); the caller may free its handles.
 *
 * @param features  Samples along dimension 0 (memory shared, see Ownership). Must not be NULL.
 * @param config_json  JSON object as above, read during the call; NULL means all defaults.
 * @param out  Receives a new data loader handle, owned by the caller, who frees it with accel_dataloader_free();
 *             NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_create_from_tensors(const accel_tensor_t *features,
                                                                              const accel_tensor_t *labels,
                                                                              const char *config_json,
                                                                              accel_dataloader_t **out) ACCEL_NOEXCEPT;

/**
 * A loader over one token stream for language-model training: sample i is the window of
 * block_size + 1 tokens starting at i * stride; its inputs are the first block_size tokens and its
 * labels the next token at each position (inputs shifted by one), both int64 [block_size], so a batch
 * is inputs [B, block_size] and labels [B, block_size] for the "causal_lm" loss.
 *   {"block_size": <required, >= 1>, "stride": block_size, "batch_size": 1, "shuffle": false,
 *    "seed": \<uint64\>, "drop_last": false}
 * The other keys behave as in accel_dataloader_create_from_tensors (shuffling, sharding across
 * processes, save_state positions). Windows that would run past the end are not made: there are
 * (n - block_size - 1) / stride + 1 samples for n tokens.
 * @param tokens A 1-d tensor of any integer dtype (int64 is used as it is, others are copied to int64).
 * @return ACCEL_ERR_INVALID_ARGUMENT naming "tokens" (not 1-d, not integer, shorter than
 *         block_size + 1) or the JSON key.
 * Ownership: an int64 stream is shared (no copy); the caller may free its handle.
 *
 * @param config_json  JSON object as above, read during the call; block_size is required.
 * @param out  Receives a new data loader handle, owned by the caller, who frees it with accel_dataloader_free();
 *             NULL on failure. Must not be NULL.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_create_from_tokens(const accel_tensor_t *tokens,
                                                                             const char *config_json,
                                                                             accel_dataloader_t **out) ACCEL_NOEXCEPT;

/**
 * A loader over datasets in files, read without loading them: the files are memory-mapped and each batch
 * reads only its own windows or rows (pread into the batch), so a corpus larger than memory trains with a
 * resident set of a few batches. Sharding, shuffling, skip_first_batches and save_state / load_state
 * positions work as for accel_dataloader_create_from_tensors.
 *
 * A token stream, cut into windows as accel_dataloader_create_from_tokens cuts them (same samples):
 *   {"format": "tokens", "files": ["train-*.bin"], "dtype": "uint16", "block_size": 1024, "stride": block_size}
 *     raw little-endian token files (nanoGPT's train.bin, Megatron's .bin); dtype "uint8", "uint16",
 *     "int32", "int64" (also "int8", "int16", "uint32", "uint64"), tokens widened to int64.
 *   {"format": "npy", "files": [...], "block_size": ...}  1-d integer .npy arrays.
 *   {"format": "safetensors", "files": [...], "tensor": "tokens", "block_size": ...}  a 1-d integer tensor of
 *     each file.
 *   "files" is one path or a list of paths and glob patterns (a pattern's matches in sorted order); the files
 *   are one stream in that order, so a window may span two files.
 * Samples along dimension 0:
 *   {"format": "npy", "features": "x.npy", "labels": "y.npy"}  (labels optional)
 *   {"format": "safetensors", "file": "data.safetensors", "features": "x", "labels": "y"}  tensor names.
 * Plus the loader keys of accel_dataloader_create_from_tensors ("batch_size", "shuffle", "seed", "drop_last",
 * ...). "dtype" may also be given for npy / safetensors: it must then match the file.
 *
 * @param config_json  JSON object as above, read during the call. Must not be NULL.
 * @param out  Receives a new data loader handle, owned by the caller, who frees it with accel_dataloader_free();
 *             NULL on failure. Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT naming the key (a wrong dtype name, windows larger than the
 *         stream, ...); ACCEL_ERR_NOT_FOUND naming a missing file, a pattern matching none, or a missing tensor;
 *         ACCEL_ERR_DATA_LOSS naming a file whose header lies (an .npy shape the file does not hold);
 *         ACCEL_ERR_UNIMPLEMENTED for fortran-order or big-endian arrays. A file that becomes shorter while the
 *         loader reads it fails accel_dataloader_next() with ACCEL_ERR_DATA_LOSS naming it.
 * Ownership: the loader keeps the files open until it and every loader made from it are freed.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_create_from_files(const char *config_json,
                                                                            accel_dataloader_t **out) ACCEL_NOEXCEPT;

/**
 * Frees the handle. NULL is fine.
 *
 * @param dataloader  The handle to free, or NULL (then nothing happens).
 * Ownership: takes @p dataloader: it must not be used after the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_API void accel_dataloader_free(accel_dataloader_t *dataloader) ACCEL_NOEXCEPT;

/**
 * The next batch of the current pass. At the end of a pass, returns ACCEL_OK with *out = NULL; the
 * next call starts the next pass (epoch + 1), as a new `for batch in dataloader` loop does.
 * A prepared loader tells the accelerator when the last batch is being processed (end_of_dataloader).
 * Ownership: free *out with accel_batch_free().
 *
 * @param dataloader  The data loader (borrowed for the call). Must not be NULL.
 * @param out  Receives a new batch handle, owned by the caller, who frees it with accel_batch_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_next(accel_dataloader_t *dataloader,
                                                               accel_batch_t **out) ACCEL_NOEXCEPT;

/**
 * Number of batches in one pass (len(dataloader)).
 *
 * @param dataloader  The data loader (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_get_length(const accel_dataloader_t *dataloader,
                                                                     int64_t *out) ACCEL_NOEXCEPT;

/**
 * Set the epoch used to seed the next pass's shuffle; restarts the pass if one is in progress.
 *
 * @param dataloader  The data loader (borrowed for the call). Must not be NULL.
 * @param epoch  The epoch, >= 0.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_set_epoch(accel_dataloader_t *dataloader,
                                                                    int64_t epoch) ACCEL_NOEXCEPT;

/**
 * The epoch the current (or next) pass uses.
 *
 * @param dataloader  The data loader (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_get_epoch(const accel_dataloader_t *dataloader,
                                                                    int64_t *out) ACCEL_NOEXCEPT;

/**
 * A new loader that skips the first @p num_batches batches of the current pass only (Accelerate's
 * skip_first_batches): its first pass has length - num_batches batches, later passes are whole.
 * It shares the dataset and keeps the source's epoch and preparation.
 * @return ACCEL_ERR_OUT_OF_RANGE if num_batches < 0.
 *
 * @param dataloader  The data loader (borrowed for the call). Must not be NULL.
 * @param num_batches  Batches of the current pass to skip, >= 0.
 * @param out  Receives a new data loader handle, owned by the caller, who frees it with accel_dataloader_free();
 *             NULL on failure. Must not be NULL.
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_skip_first_batches(const accel_dataloader_t *dataloader,
                                                                             int64_t num_batches,
                                                                             accel_dataloader_t **out) ACCEL_NOEXCEPT;

/**
 * Frees a batch. NULL is fine.
 *
 * @param batch  The handle to free, or NULL (then nothing happens).
 * Ownership: takes @p batch: it must not be used after the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_API void accel_batch_free(accel_batch_t *batch) ACCEL_NOEXCEPT;

/**
 * The batch's inputs (features). Ownership: free *out with accel_tensor_free(); shares memory.
 *
 * @param batch  The batch (borrowed for the call). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_batch_get_inputs(const accel_batch_t *batch,
                                                                accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * The batch's labels; *out is NULL when the loader has no labels.
 *
 * @param batch  The batch (borrowed for the call). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_batch_get_labels(const accel_batch_t *batch,
                                                                accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * Number of samples in the batch.
 *
 * @param batch  The batch (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_batch_get_size(const accel_batch_t *batch,
                                                              int64_t *out) ACCEL_NOEXCEPT;
/**
 * The data set indices of the batch's samples, as a 1-d int64 tensor in batch order: which samples
 * this process got after shuffling and sharding (samples repeated to even out the last batch appear
 * again). Ownership: borrows @p batch; free *out with accel_tensor_free().
 * Threads: same rules as the data loader that yielded the batch.
 *
 * @param batch  The batch (borrowed for the call). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_batch_get_indices(const accel_batch_t *batch,
                                                                 accel_tensor_t **out) ACCEL_NOEXCEPT;

/* ---- Datasets from the caller's code ------------------------------------------------------------- */

/**
 * The callbacks of a dataset written by the caller. Every callback returns ACCEL_OK or an error status;
 * with an error, call accel_callback_set_error() just before returning to give the message that
 * accel_dataloader_next() then reports (the bindings do it with the exception's text).
 * Threads: with "num_workers" > 0, a map dataset's get (and the collate) run on the loader's worker threads,
 * several at once: they must be safe to call concurrently. Otherwise every callback runs on the thread that
 * calls accel_dataloader_next(). release runs once, on the thread that frees the last loader sharing it.
 */
/** The number of samples (len(dataset)), asked once when the loader is created. */
typedef accel_status_t (*accel_dataset_length_fn_t)(void *user_data, int64_t *out);
/**
 * Sample @p index (0 <= index < length): its inputs in *out_inputs (required) and its labels in *out_labels
 * (leave NULL for none; all samples alike). accel takes both tensor handles (it frees them).
 */
typedef accel_status_t (*accel_dataset_get_fn_t)(void *user_data, int64_t index, accel_tensor_t **out_inputs,
                                                 accel_tensor_t **out_labels);
/**
 * The next sample of an iterable dataset, as accel_dataset_get_fn_t; leave *out_inputs NULL at the end of
 * the pass.
 */
typedef accel_status_t (*accel_dataset_next_fn_t)(void *user_data, accel_tensor_t **out_inputs,
                                                  accel_tensor_t **out_labels);
/** Starts pass @p epoch of an iterable dataset (iter(dataset) after dataset.set_epoch(epoch)). */
typedef accel_status_t (*accel_dataset_set_epoch_fn_t)(void *user_data, int64_t epoch);
/**
 * The iterable dataset's position as bytes (torchdata's Stateful.state_dict()): *out_data stays owned by the
 * caller and must stay valid until the next callback of this dataset.
 */
typedef accel_status_t (*accel_dataset_state_fn_t)(void *user_data, const uint8_t **out_data, size_t *out_len);
/** Puts the iterable dataset back where state() said it was (after set_epoch of the saved pass). */
typedef accel_status_t (*accel_dataset_load_state_fn_t)(void *user_data, const uint8_t *data, size_t len);
/** Frees @p user_data once no loader uses the dataset any more. */
typedef void (*accel_dataset_release_fn_t)(void *user_data);

/** A map-style dataset (PyTorch's Dataset: __len__ and __getitem__). */
typedef struct accel_map_dataset {
    accel_dataset_length_fn_t length;   /**< required */
    accel_dataset_get_fn_t get;         /**< required */
    accel_dataset_release_fn_t release; /**< may be NULL */
    void *user_data;                    /**< passed to every callback */
} accel_map_dataset_t;

/** An iterable dataset (PyTorch's IterableDataset, with torchdata's state_dict/load_state_dict). */
typedef struct accel_iterable_dataset {
    accel_dataset_set_epoch_fn_t set_epoch;   /**< required */
    accel_dataset_next_fn_t next;             /**< required */
    accel_dataset_state_fn_t state;           /**< NULL: a resume re-reads the pass and skips what was taken */
    accel_dataset_load_state_fn_t load_state; /**< NULL exactly when state is NULL */
    accel_dataset_release_fn_t release;       /**< may be NULL */
    void *user_data;                          /**< passed to every callback */
} accel_iterable_dataset_t;

/**
 * The caller's collate (PyTorch's collate_fn): @p count samples, their inputs in @p inputs and their labels
 * in @p labels (NULL when the samples have none), borrowed for the call. Set *out_inputs (required),
 * *out_labels and *out_attention_mask (optional) to new tensor handles with the batch along dimension 0;
 * accel takes them.
 */
typedef accel_status_t (*accel_collate_fn_t)(void *user_data, const accel_tensor_t *const *inputs,
                                             const accel_tensor_t *const *labels, size_t count,
                                             accel_tensor_t **out_inputs, accel_tensor_t **out_labels,
                                             accel_tensor_t **out_attention_mask);

/**
 * Gives the message of the error status a callback is about to return: accel_dataloader_next() reports
 * it with that status. Call it last, just before returning (any other accel call clears it).
 *
 * @param message  UTF-8 text, copied; NULL clears it.
 * Ownership: copies @p message.
 * Threads: per thread; call it on the thread the callback runs on.
 */
ACCEL_API void accel_callback_set_error(const char *message) ACCEL_NOEXCEPT;

/**
 * A loader over a map-style dataset of the caller's: the same sampler, shuffling, sharding across processes,
 * dispatching and save_state positions as accel_dataloader_create_from_tensors, the samples read with
 * dataset->get and collated:
 *   {"batch_size": 1, "shuffle": false, "seed": \<uint64\>, "drop_last": false, "num_workers": 0,
 *    "prefetch_factor": 2, "collate": "stack" | "pad", "pad_token_id": 0, "label_pad_token_id": -100,
 *    "causal_lm": false}
 * "stack": every sample's inputs (and labels) must have the same shape; a sample that differs is an
 * ACCEL_ERR_INVALID_ARGUMENT naming its index. "pad" (variable-length token sequences, 1-d integer inputs):
 * inputs padded on the right to the longest with pad_token_id, an attention mask (1 = token, 0 = padding;
 * accel_batch_get_attention_mask()) and labels set to label_pad_token_id at padding; without labels the
 * labels are the inputs; "causal_lm": sample tokens t become inputs t[:-1] and labels t[1:] (what the
 * "causal_lm" loss expects) before padding.
 * "num_workers" threads read batches ahead ("prefetch_factor" batches each); the batches and their order are
 * the same for any number of workers.
 *
 * @param dataset  The callbacks, copied during the call (user_data is kept). Must not be NULL.
 * @param collate  The caller's collate, or NULL for the config's "collate".
 * @param collate_user_data  Passed to @p collate; must stay valid while the loader lives.
 * @param config_json  JSON object as above, read during the call; NULL means all defaults.
 * @param out  Receives a new data loader handle, owned by the caller, who frees it with accel_dataloader_free();
 *             NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()); a failing
 *         length callback's status and message.
 * Ownership: on success the loader owns dataset->user_data (released with dataset->release); on failure the
 * caller keeps it.
 * Threads: see accel_map_dataset_t; the loader itself follows the rules of docs/concepts/ownership-threads.md.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_create_from_map_dataset(
    const accel_map_dataset_t *dataset, accel_collate_fn_t collate, void *collate_user_data, const char *config_json,
    accel_dataloader_t **out) ACCEL_NOEXCEPT;

/**
 * A loader over an iterable dataset of the caller's (a stream with no length): batches of "batch_size"
 * consecutive samples, collated as in accel_dataloader_create_from_map_dataset (same keys; "shuffle" and
 * "seed" are refused: shuffle in the dataset). Prepared on several processes it is sharded as Accelerate
 * does: with dataloader_config.dispatch_batches (the default for iterable datasets) rank 0 alone reads and
 * sends every process its slice; with dispatch_batches false every process reads the whole stream and keeps
 * its part (IterableDatasetShard). accel_dataloader_get_length() is ACCEL_ERR_FAILED_PRECONDITION (no len).
 * save_state keeps the dataset's state() after the last batch taken; load_state calls set_epoch and
 * load_state, so the next batches are those the uninterrupted run would have had (on the same number of
 * processes; on another one the pass restarts, with a warning). "num_workers" > 0: one thread reads the stream
 * ahead, up to num_workers x prefetch_factor batches (a stream has one reader; the batches are the same).
 *
 * @param dataset  The callbacks, copied during the call (user_data is kept). Must not be NULL.
 * @param collate  The caller's collate, or NULL for the config's "collate".
 * @param collate_user_data  Passed to @p collate; must stay valid while the loader lives.
 * @param config_json  JSON object as above, read during the call; NULL means all defaults.
 * @param out  Receives a new data loader handle, owned by the caller, who frees it with accel_dataloader_free();
 *             NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: on success the loader owns dataset->user_data (released with dataset->release); on failure the
 * caller keeps it.
 * Threads: the callbacks run on the thread calling accel_dataloader_next() (state: the loader's reading thread
 * with "num_workers" > 0; load_state: the thread starting the pass), never two at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_dataloader_create_from_iterable_dataset(
    const accel_iterable_dataset_t *dataset, accel_collate_fn_t collate, void *collate_user_data,
    const char *config_json, accel_dataloader_t **out) ACCEL_NOEXCEPT;

/**
 * The batch's attention mask (1 = token, 0 = padding) from the "pad" collate or the caller's collate;
 * *out is NULL when the batch has none.
 *
 * @param batch  The batch (borrowed for the call). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL when
 *             there is none or on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows @p batch; the caller owns what *out receives.
 * Threads: same rules as the data loader that yielded the batch.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_batch_get_attention_mask(const accel_batch_t *batch,
                                                                        accel_tensor_t **out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_DATALOADER_H */
