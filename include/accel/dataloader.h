/** @file
 * data loaders over in-memory tensors. */
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

ACCEL_END_DECLS

#endif /* ACCEL_DATALOADER_H */
