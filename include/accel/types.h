/** @file
 * opaque handles and enumerations. */
#ifndef ACCEL_TYPES_H
#define ACCEL_TYPES_H

#include <accel/common.h>

ACCEL_BEGIN_DECLS

/** The training orchestrator: Accelerate's `Accelerator`. */
typedef struct accel_accelerator accel_accelerator_t;
/** A module: built from a JSON spec or loaded from TorchScript. */
typedef struct accel_model accel_model_t;
/** An optimizer over a model's parameters (Accelerate's AcceleratedOptimizer once prepared). */
typedef struct accel_optimizer accel_optimizer_t;
/** A learning-rate scheduler bound to an optimizer (AcceleratedScheduler once prepared). */
typedef struct accel_scheduler accel_scheduler_t;
/** A data loader over in-memory tensors (DataLoaderShard once prepared). */
typedef struct accel_dataloader accel_dataloader_t;
/** One batch yielded by a data loader: inputs and labels. */
typedef struct accel_batch accel_batch_t;
/** An n-dimensional array owned by the library. */
typedef struct accel_tensor accel_tensor_t;
/** Byte strings received by an object collective (accel_accelerator_gather_object and the broadcasts). */
typedef struct accel_object_list accel_object_list_t;
/** A model's state dict in memory (accel_accelerator_get_state_dict): keys and tensors, in order. */
typedef struct accel_state_dict accel_state_dict_t;

/** Element types of tensors. Values are only ever appended. */
typedef int32_t accel_dtype_t;
/** Values of accel_dtype_t. */
enum accel_dtype_enum {
    ACCEL_DTYPE_FLOAT32 = 0,  /**< torch.float32 */
    ACCEL_DTYPE_FLOAT64 = 1,  /**< torch.float64 */
    ACCEL_DTYPE_FLOAT16 = 2,  /**< torch.float16 */
    ACCEL_DTYPE_BFLOAT16 = 3, /**< torch.bfloat16 */
    ACCEL_DTYPE_INT8 = 4,     /**< torch.int8 */
    ACCEL_DTYPE_UINT8 = 5,    /**< torch.uint8 */
    ACCEL_DTYPE_INT16 = 6,    /**< torch.int16 */
    ACCEL_DTYPE_INT32 = 7,    /**< torch.int32 */
    ACCEL_DTYPE_INT64 = 8,    /**< torch.int64 */
    ACCEL_DTYPE_BOOL = 9      /**< torch.bool (one byte per element) */
};

/** Mixed-precision modes (the config's "mixed_precision" strings "no", "fp16", "bf16", "fp8"). */
typedef int32_t accel_mixed_precision_t;
/** Values of accel_mixed_precision_t. */
enum accel_mixed_precision_enum {
    ACCEL_MIXED_PRECISION_NO = 0,   /**< "no": fp32 */
    ACCEL_MIXED_PRECISION_FP16 = 1, /**< "fp16" */
    ACCEL_MIXED_PRECISION_BF16 = 2, /**< "bf16" */
    ACCEL_MIXED_PRECISION_FP8 = 3   /**< "fp8" (emulated) */
};

ACCEL_END_DECLS

#endif /* ACCEL_TYPES_H */
