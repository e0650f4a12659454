#include "config/json_value.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <cstring>

namespace accel::config {

void check_json_value(const char *text, const std::string &what) { JsonDocument doc(text, what); }

std::string json_array_elements(const char *text, const std::string &what)
{
    JsonDocument doc(text, what);
    if (!cJSON_IsArray(doc.root()))
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": expected a JSON array (gather_object concatenates every process's "
                                                "list, as Accelerate's does; wrap a single value as [value]), got " +
                                             describe(doc.root()));
    // A valid array: its first '[' and last ']' are the brackets; JSON's blanks are the four below.
    const char *blanks = " \t\r\n";
    std::string s(text);
    const size_t open = s.find('['), close = s.rfind(']');
    const size_t first = s.find_first_not_of(blanks, open + 1);
    if (first == close) return {};
    const size_t last = s.find_last_not_of(blanks, close - 1);
    return s.substr(first, last - first + 1);
}

} // namespace accel::config
