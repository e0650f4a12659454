#include "common/out_of_memory.hpp"

#include "common/error.hpp"

#include <cctype>
#include <sys/sysinfo.h>

namespace accel {

namespace {

// The text after `marker` up to the next character that cannot belong to a size ("8000000000", "2.00 GiB").
std::string size_after(const std::string &s, const std::string &marker)
{
    const size_t at = s.find(marker);
    if (at == std::string::npos) return "";
    size_t i = at + marker.size(), end = i;
    while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.')) ++end;
    if (end == i) return "";
    // a unit: " bytes", " GiB", " MiB", ...
    size_t unit = end;
    if (unit < s.size() && s[unit] == ' ') ++unit;
    size_t unit_end = unit;
    while (unit_end < s.size() && std::isalpha(static_cast<unsigned char>(s[unit_end]))) ++unit_end;
    return s.substr(i, unit_end > unit ? unit_end - i : end - i);
}

} // namespace

bool is_out_of_memory(const std::string &what)
{
    for (const char *marker : {"can't allocate memory",   // c10's DefaultCPUAllocator (posix_memalign failed)
                               "CUDA out of memory",      // c10's CUDA caching allocator
                               "out of memory",           // cudaErrorMemoryAllocation, OutOfMemoryError, accel's own
                               "std::bad_alloc",          // operator new
                               "Cannot allocate memory"}) // strerror(ENOMEM)
        if (what.find(marker) != std::string::npos) return true;
    return false;
}

std::string out_of_memory_message(const std::string &what)
{
    const size_t begin = what.find_first_not_of('\n');
    const std::string line = begin == std::string::npos ? "" : what.substr(begin, what.find('\n', begin) - begin);
    std::string size = size_after(line, "you tried to allocate "); // CPU: "... you tried to allocate N bytes."
    if (size.empty()) size = size_after(line, "Tried to allocate ");    // CUDA: "Tried to allocate 2.00 GiB"
    if (line.rfind("out of memory", 0) == 0) return line;              // said so already
    return std::string("out of memory") + (size.empty() ? "" : " (an allocation of " + size + " failed)") +
           (line.empty() ? "" : ": " + line);
}

void fail_if_out_of_memory(const std::string &what, const std::string &context)
{
    if (is_out_of_memory(what)) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, context + ": " + out_of_memory_message(what));
}

uint64_t memory_ceiling()
{
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return UINT64_MAX;
    return (static_cast<uint64_t>(si.totalram) + si.totalswap) * si.mem_unit;
}

} // namespace accel
