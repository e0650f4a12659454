/* accel/checkpoint.h - save_state / load_state (not yet supported in this release). */
#ifndef ACCEL_CHECKPOINT_H
#define ACCEL_CHECKPOINT_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Save the accelerator's state in Accelerate's checkpoint layout.
 * Not yet supported: always ACCEL_ERR_UNIMPLEMENTED in this release.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_save_state(accel_accelerator_t *accelerator,
                                                                      const char *output_dir) ACCEL_NOEXCEPT;
/**
 * Load state saved by accel_accelerator_save_state().
 * Not yet supported: always ACCEL_ERR_UNIMPLEMENTED in this release.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_load_state(accel_accelerator_t *accelerator,
                                                                      const char *input_dir) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_CHECKPOINT_H */
