/* typemaps/strings.i - UTF-8 strings in and out.
 *
 * `const char *` arguments map to the language's string (SWIG's default, NUL-terminated UTF-8; Java's
 * NewStringUTF/GetStringUTFChars and Mono's marshaller both produce UTF-8). Owned strings (`char **out`,
 * freed with accel_string_free) are copied into a std::string by owned_string() and returned through
 * std_string.i, so no library memory reaches the target language. Borrowed `const char **out` strings are
 * copied the same way. */

%include <std_string.i>

%{
namespace accel_swig {
/* Takes ownership of @p s (from a `char **out`), returns a copy and frees it with accel_string_free(). */
inline std::string owned_string(char *s)
{
    std::string copy = s ? s : "";
    accel_string_free(s);
    return copy;
}
inline std::string borrowed_string(const char *s) { return s ? s : ""; }
} // namespace accel_swig
%}
