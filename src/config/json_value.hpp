// JSON values that callers hand to the object collectives (accel_accelerator_gather_object_json and
// broadcast_object_json): checked here, in src/config/, where JSON is parsed, and passed on as the text given.
#pragma once

#include <string>

namespace accel::config {

// Throws ACCEL_ERR_INVALID_ARGUMENT naming `what` unless `text` is exactly one JSON value.
void check_json_value(const char *text, const std::string &what);

// The elements of the JSON array `text` as written, without the brackets and surrounding blanks ("" for []),
// so that arrays can be joined with commas. Throws ACCEL_ERR_INVALID_ARGUMENT naming `what` unless `text` is
// one JSON array.
std::string json_array_elements(const char *text, const std::string &what);

} // namespace accel::config
