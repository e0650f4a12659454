// accel::logging (accel.hpp's wrapper of accel_log_*): threshold, a std::function sink, write, errors.
#include <accel/accel.hpp>

#include "expect.hpp"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

int main()
{
    try {
        struct Line {
            accel_log_level_t level;
            std::string name, message;
        };
        std::vector<Line> seen;
        accel::logging::set_callback([&seen](accel_log_level_t level, const std::string &name, std::int32_t,
                                             const std::string &message) { seen.push_back({level, name, message}); });
        accel::logging::set_level(ACCEL_LOG_WARNING);
        EXPECT(accel::logging::level() == ACCEL_LOG_WARNING);
        accel::logging::write("dropped", ACCEL_LOG_INFO, "app");
        accel::logging::write("kept", ACCEL_LOG_ERROR, "app");
        EXPECT(seen.size() == 1 && seen[0].level == ACCEL_LOG_ERROR && seen[0].name == "app" &&
               seen[0].message == "kept");
        accel::logging::set_level(ACCEL_LOG_DEBUG);
        accel::logging::write("now kept"); // INFO under the "accel" logger by default
        EXPECT(seen.size() == 2 && seen[1].name == "accel" && seen[1].level == ACCEL_LOG_INFO);

        // A sink that throws loses its message and nothing else; the next sink works.
        accel::logging::set_callback([](accel_log_level_t, const std::string &, std::int32_t, const std::string &) {
            throw std::runtime_error("sink failed");
        });
        accel::logging::write("lost", ACCEL_LOG_WARNING);
        accel::logging::set_callback({}); // standard error again
        accel::logging::write("to stderr", ACCEL_LOG_WARNING, "app");
        EXPECT(seen.size() == 2);

        try {
            accel::logging::set_level(51);
            EXPECT(false);
        } catch (const accel::Error &e) {
            EXPECT(e.status() == ACCEL_ERR_INVALID_ARGUMENT);
        }
        try {
            accel::logging::write("x", 0);
            EXPECT(false);
        } catch (const accel::Error &e) {
            EXPECT(e.status() == ACCEL_ERR_INVALID_ARGUMENT);
        }
    } catch (const accel::Error &e) {
        std::fprintf(stderr, "accel error %d: %s\n", e.status(), e.what());
        return 1;
    }
    std::puts("cpp log test: ok");
    return 0;
}
