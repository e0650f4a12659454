/** @file
 * the whole public C API. */
#ifndef ACCEL_ACCEL_H
#define ACCEL_ACCEL_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/version.h>
#include <accel/types.h>
#include <accel/tensor.h>
#include <accel/model.h>
#include <accel/optimizer.h>
#include <accel/scheduler.h>
#include <accel/dataloader.h>
#include <accel/loss.h>
#include <accel/accelerator.h>
#include <accel/checkpoint.h>
#include <accel/tracking.h>
#include <accel/log.h>
#include <accel/memory.h>
#include <accel/big_modeling.h>
#include <accel/dispatch.h>

#endif /* ACCEL_ACCEL_H */
