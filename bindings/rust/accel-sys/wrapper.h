#include <accel/accel.h>
