#include "checkpointing/integrity.hpp"

#include "checkpointing/sharded_folder.hpp"
#include "common/error.hpp"
#include "common/job_pool.hpp"

#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>

namespace accel::ckpt {

namespace {

constexpr const char *kManifestFormat = "accel.checksums";
constexpr const char *kSelfKey = "\"self_crc32\": \"";
constexpr const char *kNotePrefix = ".accel-crc-";
constexpr size_t kReadChunk = size_t(1) << 20;

std::string hex8(uint32_t v)
{
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", v);
    return buf;
}

std::optional<uint32_t> parse_hex8(const std::string &s)
{
    if (s.size() != 8) return std::nullopt;
    uint32_t v = 0;
    for (char c : s) {
        const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return std::nullopt;
        v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
}

uint32_t crc_of_text(const std::string &s)
{
    return static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef *>(s.data()), static_cast<uInt>(s.size())));
}

// One piece read with pread in chunks (no page-table work on the map, an error rather than SIGBUS if the file
// shrank).
uint32_t crc_piece(const MappedFile &f, uint64_t offset, uint64_t len)
{
    std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(len, kReadChunk)));
    uLong crc = ::crc32(0L, Z_NULL, 0);
    for (uint64_t at = 0; at < len;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(len - at, buf.size()));
        f.read_at(buf.data(), static_cast<size_t>(offset + at), n);
        crc = ::crc32(crc, buf.data(), static_cast<uInt>(n));
        at += n;
    }
    return static_cast<uint32_t>(crc);
}

thread_local std::set<std::string> *trusted_files = nullptr;

uint16_t le16(const uint8_t *p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t le32(const uint8_t *p) { return static_cast<uint32_t>(le16(p)) | static_cast<uint32_t>(le16(p + 2)) << 16; }
uint64_t le64(const uint8_t *p) { return static_cast<uint64_t>(le32(p)) | static_cast<uint64_t>(le32(p + 4)) << 32; }

} // namespace

bool checkpoint_verification_enabled()
{
    // The one switch of this file, read where it is used (no configuration object reaches the readers).
    const char *v = std::getenv("ACCEL_CHECKPOINT_VERIFY");
    if (v == nullptr) return true;
    std::string s(v);
    for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return !(s == "0" || s == "false" || s == "no" || s == "off");
}

uint32_t crc32_of(const MappedFile &f, uint64_t offset, uint64_t len)
{
    struct Part {
        uint64_t at, len;
        uint32_t crc;
    };
    std::vector<Part> parts;
    for (uint64_t at = 0; at < len; at += kIoPiece) parts.push_back({at, std::min<uint64_t>(kIoPiece, len - at), 0});
    std::vector<std::function<void()>> jobs;
    for (Part &p : parts) jobs.emplace_back([&f, &p, offset] { p.crc = crc_piece(f, offset + p.at, p.len); });
    run_jobs(jobs, io_threads_for(static_cast<size_t>(len)));
    uLong crc = ::crc32(0L, Z_NULL, 0);
    for (const Part &p : parts) crc = ::crc32_combine(crc, p.crc, static_cast<z_off_t>(p.len));
    return static_cast<uint32_t>(crc);
}

FileSum file_sum(const std::string &path)
{
    const MappedFile f(path);
    return {f.size(), crc32_of(f, 0, f.size())};
}

// ---- records -------------------------------------------------------------------------------------------

std::string seal_checksums(const std::string &object_text, const FileSums &sums)
{
    const size_t close = object_text.rfind('}');
    if (close == std::string::npos) fail(ACCEL_ERR_INTERNAL, "seal_checksums: not a JSON object");
    std::string body = object_text.substr(0, close);
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.pop_back();
    std::string out = body + ",\n  \"checksums\": {";
    size_t i = 0;
    for (const auto &[name, s] : sums)
        out += std::string(i++ ? "," : "") + "\n    " + json_quote(name) + ": {\"size\": " + std::to_string(s.size) +
               ", \"crc32\": \"" + hex8(s.crc32) + "\"}";
    out += std::string(sums.empty() ? "" : "\n  ") + "},\n  " + kSelfKey;
    // The record's own CRC-32 is taken over its text with zeros in place of the value.
    const size_t value_at = out.size();
    out += "00000000\"\n}\n";
    out.replace(value_at, 8, hex8(crc_of_text(out)));
    return out;
}

std::optional<FileSums> read_sealed_checksums(const std::string &text, const JsonValue &root, const std::string &path)
{
    const JsonValue *sums = root.find("checksums");
    const JsonValue *self = root.find("self_crc32");
    if (sums == nullptr && self == nullptr) return std::nullopt;
    auto bad = [&path](const std::string &what) -> void { fail(ACCEL_ERR_DATA_LOSS, path + ": " + what); };
    if (self == nullptr || self->kind != JsonValue::Kind::String || !parse_hex8(self->text))
        bad("\"self_crc32\" is missing or not 8 hex digits: the file was damaged or edited");
    const size_t key = text.rfind(kSelfKey);
    const size_t value_at = key == std::string::npos ? key : key + std::strlen(kSelfKey);
    if (key == std::string::npos || text.compare(value_at, 8, self->text) != 0)
        bad("\"self_crc32\" is not where accel writes it: the file was edited");
    std::string zeroed = text;
    zeroed.replace(value_at, 8, "00000000");
    const uint32_t got = crc_of_text(zeroed);
    if (got != *parse_hex8(self->text))
        bad("its text does not match its own CRC-32 (self_crc32 " + self->text + ", the text gives " + hex8(got) +
            "): the file was damaged or edited");
    if (sums == nullptr || sums->kind != JsonValue::Kind::Object) bad("\"checksums\" is not an object");
    FileSums out;
    for (const auto &[name, v] : sums->members) {
        const JsonValue *size = v.kind == JsonValue::Kind::Object ? v.find("size") : nullptr;
        const JsonValue *crc = v.kind == JsonValue::Kind::Object ? v.find("crc32") : nullptr;
        // A listed name is a file of this folder: nothing outside it is ever opened.
        if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
            name.find('\0') != std::string::npos)
            bad("\"checksums\" lists \"" + name + "\", which is not a file name");
        if (size == nullptr || size->kind != JsonValue::Kind::Number || !size->is_uint || crc == nullptr ||
            crc->kind != JsonValue::Kind::String || !parse_hex8(crc->text))
            bad("the checksum of \"" + name + "\" is not {\"size\": N, \"crc32\": \"8 hex digits\"}");
        out[name] = FileSum{size->uint_value, *parse_hex8(crc->text)};
    }
    return out;
}

std::string manifest_text(const FileSums &sums)
{
    return seal_checksums("{\n  \"format\": \"" + std::string(kManifestFormat) + "\",\n  \"version\": 1\n}", sums);
}

FileSums parse_manifest(const std::string &text, const std::string &path)
{
    const JsonValue root = parse_json(text.data(), text.size(), path);
    auto bad = [&path](const std::string &what) -> void { fail(ACCEL_ERR_DATA_LOSS, path + ": " + what); };
    if (root.kind != JsonValue::Kind::Object) bad("not a JSON object");
    const JsonValue *format = root.find("format");
    if (format == nullptr || format->kind != JsonValue::Kind::String || format->text != kManifestFormat)
        bad("\"format\" is not \"" + std::string(kManifestFormat) + "\"");
    const JsonValue *version = root.find("version");
    if (version == nullptr || !version->is_uint || version->uint_value != 1) bad("\"version\" is not 1 (written by a newer accel?)");
    auto sums = read_sealed_checksums(text, root, path);
    if (!sums) bad("has no \"checksums\"");
    return *sums;
}

void verify_files(const std::string &dir, const FileSums &sums)
{
    for (const auto &[name, want] : sums) {
        const std::string path = join(dir, name);
        if (!is_regular_file(path))
            fail(ACCEL_ERR_DATA_LOSS, "\"" + path + "\" is missing: the checkpoint's record of its files lists it");
        const MappedFile f(path);
        if (f.size() != want.size)
            fail(ACCEL_ERR_DATA_LOSS, "\"" + path + "\" has " + std::to_string(f.size()) + " bytes; " +
                                          std::to_string(want.size) + " were written (" +
                                          (f.size() < want.size ? "truncated" : "grown") + ")");
        const uint32_t got = crc32_of(f, 0, f.size());
        if (got != want.crc32)
            fail(ACCEL_ERR_DATA_LOSS, "\"" + path + "\" is damaged: its CRC-32 is " + hex8(got) + ", " + hex8(want.crc32) +
                                          " was recorded when it was written");
        if (trusted_files != nullptr) trusted_files->insert(path);
    }
}

void verify_folder_manifest(const std::string &dir, const std::function<bool(const std::string &name)> &wanted)
{
    const std::string path = join(dir, kChecksumManifest);
    if (!checkpoint_verification_enabled() || !exists(path)) return;
    FileSums sums = parse_manifest(read_small_file(path, 64u << 20), path);
    if (wanted)
        for (auto it = sums.begin(); it != sums.end();) it = wanted(it->first) ? std::next(it) : sums.erase(it);
    verify_files(dir, sums);
}

TrustScope::TrustScope() : owner_(trusted_files == nullptr)
{
    if (owner_) trusted_files = new std::set<std::string>();
}

TrustScope::~TrustScope()
{
    if (!owner_) return;
    delete trusted_files;
    trusted_files = nullptr;
}

bool is_trusted(const std::string &path) { return trusted_files != nullptr && trusted_files->count(path) != 0; }

// ---- zip -------------------------------------------------------------------------------------------------

std::vector<ZipMember> zip_members(const uint8_t *d, size_t n, const std::string &path)
{
    auto bad = [&path](const std::string &what) -> void {
        fail(ACCEL_ERR_DATA_LOSS, path + ": not a readable zip archive: " + what);
    };
    auto need = [&](uint64_t at, uint64_t len, const char *what) {
        if (at > n || len > n - at) bad(std::string(what) + " lies past the end of the file");
    };
    // The end-of-central-directory record: the last 22 bytes plus a comment of at most 65535.
    if (n < 22) bad("shorter than an end-of-central-directory record");
    size_t eocd = n - 22;
    const size_t lowest = n - 22 > 65535 ? n - 22 - 65535 : 0;
    while (le32(d + eocd) != 0x06054b50u) {
        if (eocd == lowest) bad("no end-of-central-directory record");
        --eocd;
    }
    uint64_t entries = le16(d + eocd + 10), cd_size = le32(d + eocd + 12), cd_offset = le32(d + eocd + 16);
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_offset == 0xFFFFFFFFu) {
        if (eocd < 20 || le32(d + eocd - 20) != 0x07064b50u) bad("a zip64 archive without its zip64 locator");
        const uint64_t z = le64(d + eocd - 20 + 8);
        need(z, 56, "the zip64 end-of-central-directory record");
        if (le32(d + z) != 0x06064b50u) bad("the zip64 end-of-central-directory record is not where its locator says");
        entries = le64(d + z + 32);
        cd_size = le64(d + z + 40);
        cd_offset = le64(d + z + 48);
    }
    need(cd_offset, cd_size, "the central directory");
    if (entries > cd_size / 46) bad("the central directory is too short for its " + std::to_string(entries) + " entries");
    std::vector<ZipMember> out;
    uint64_t at = cd_offset;
    const uint64_t cd_end = cd_offset + cd_size;
    for (uint64_t i = 0; i < entries; ++i) {
        if (at > cd_end || cd_end - at < 46 || le32(d + at) != 0x02014b50u) bad("central directory entry " + std::to_string(i) + " is malformed");
        const uint8_t *e = d + at;
        ZipMember m;
        m.method = le16(e + 10);
        m.crc32 = le32(e + 16);
        m.stored_size = le32(e + 20);
        m.size = le32(e + 24);
        const uint16_t name_len = le16(e + 28), extra_len = le16(e + 30), comment_len = le16(e + 32);
        uint64_t local = le32(e + 42);
        if (cd_end - at - 46 < uint64_t(name_len) + extra_len + comment_len) bad("central directory entry " + std::to_string(i) + " runs past the directory");
        m.name.assign(reinterpret_cast<const char *>(e + 46), name_len);
        // Zip64: the fields stored as 0xFFFFFFFF follow in the extra field 0x0001, in this order.
        const uint8_t *x = e + 46 + name_len, *x_end = x + extra_len;
        while (x_end - x >= 4) {
            const uint16_t id = le16(x), len = le16(x + 2);
            if (x_end - x - 4 < len) bad("the extra field of \"" + m.name + "\" is malformed");
            if (id == 1) {
                const uint8_t *v = x + 4, *v_end = v + len;
                for (uint64_t *field : {&m.size, &m.stored_size, &local}) {
                    if (*field != 0xFFFFFFFFu) continue;
                    if (v_end - v < 8) bad("the zip64 sizes of \"" + m.name + "\" are missing");
                    *field = le64(v);
                    v += 8;
                }
            }
            x += 4 + len;
        }
        need(local, 30, "the local header of a member");
        if (le32(d + local) != 0x04034b50u) bad("the local header of \"" + m.name + "\" is not where the directory says");
        m.data_offset = local + 30 + le16(d + local + 26) + le16(d + local + 28);
        need(m.data_offset, m.stored_size, "the data of a member");
        out.push_back(std::move(m));
        at += 46 + uint64_t(name_len) + extra_len + comment_len;
    }
    return out;
}

void verify_zip_crcs(const MappedFile &f)
{
    for (const ZipMember &m : zip_members(f.data(), f.size(), f.path())) {
        if (m.method != 0) continue; // deflated: miniz's extractor checks it when the member is read
        if (m.stored_size != m.size)
            fail(ACCEL_ERR_DATA_LOSS, f.path() + ": member \"" + m.name + "\" is stored with " + std::to_string(m.stored_size) +
                                          " bytes but its size is " + std::to_string(m.size));
        const uint32_t got = crc32_of(f, m.data_offset, m.size);
        if (got != m.crc32)
            fail(ACCEL_ERR_DATA_LOSS, f.path() + ": member \"" + m.name + "\" is damaged: its bytes give CRC-32 " + hex8(got) +
                                          ", the zip's central directory records " + hex8(m.crc32));
    }
}

// ---- saving ----------------------------------------------------------------------------------------------

void note_written_files(const std::string &tmp, const std::vector<std::string> &names)
{
    if (names.empty()) return;
    // Each file is read back once, just written (from the page cache): what is recorded is what the disk holds.
    // A file every process writes (dl_state_dict.bin, the same bytes from each) may be cut short under the reader
    // by another writer's O_TRUNC: noted "?", for the main process to read once all have finished.
    std::vector<std::optional<FileSum>> sums(names.size());
    std::vector<std::function<void()>> jobs;
    for (size_t i = 0; i < names.size(); ++i)
        jobs.emplace_back([&, i] {
            try {
                sums[i] = file_sum(join(tmp, names[i]));
            } catch (const Error &) {
            }
        });
    run_jobs(jobs, io_threads());
    std::string text;
    for (size_t i = 0; i < names.size(); ++i)
        text += (sums[i] ? hex8(sums[i]->crc32) + " " + std::to_string(sums[i]->size) : std::string("? ?")) + " " +
                names[i] + "\n";
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
    write_file_durably(join(tmp, std::string(kNotePrefix) + host + "-" + std::to_string(::getpid())), text.data(), text.size());
}

void seal_checkpoint_folder(const std::string &tmp)
{
    std::map<std::string, FileSums> by_folder; // "" = the checkpoint folder itself
    std::map<std::string, int> writers;         // by name: how many processes wrote it
    for (const auto &note : list_dir(tmp)) {
        if (note.rfind(kNotePrefix, 0) != 0) continue;
        const std::string path = join(tmp, note);
        const std::string text = read_small_file(path, 64u << 20);
        size_t at = 0;
        while (at < text.size()) {
            const size_t end = text.find('\n', at);
            const std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
            at = end == std::string::npos ? text.size() : end + 1;
            const size_t s1 = line.find(' '), s2 = s1 == std::string::npos ? s1 : line.find(' ', s1 + 1);
            const bool unknown = line.compare(0, 4, "? ? ") == 0;
            auto crc = unknown ? std::optional<uint32_t>(0) : parse_hex8(line.substr(0, s1));
            if (s2 == std::string::npos || !crc) fail(ACCEL_ERR_INTERNAL, path + ": malformed line \"" + line + "\"");
            const std::string name = line.substr(s2 + 1);
            const size_t slash = name.rfind('/');
            const std::string folder = slash == std::string::npos ? "" : name.substr(0, slash);
            by_folder[folder][name.substr(slash + 1)] = FileSum{unknown ? 0 : std::stoull(line.substr(s1 + 1, s2 - s1 - 1)), *crc};
            writers[name] += unknown ? 2 : 1; // unknown: read again below
        }
        remove_all(path);
    }
    // A file several processes wrote (dl_state_dict.bin: the same bytes from each) may have been cut short by
    // another writer's O_TRUNC while one of them read it back: read once more, now that all have finished.
    for (const auto &[name, count] : writers) {
        if (count < 2) continue;
        const size_t slash = name.rfind('/');
        by_folder[slash == std::string::npos ? "" : name.substr(0, slash)][name.substr(slash + 1)] = file_sum(join(tmp, name));
    }
    for (auto &[folder, sums] : by_folder) {
        const std::string dir = folder.empty() ? tmp : join(tmp, folder);
        const std::string meta = join(dir, kShardedMetadata);
        std::string text;
        if (!folder.empty() && exists(meta)) {
            // A SHARDED folder: its index carries the record, so the folder checks itself wherever it is read.
            sums.erase(kShardedMetadata);
            text = seal_checksums(read_small_file(meta, 1u << 30), sums);
            write_file_durably(meta, text.data(), text.size());
        } else {
            text = manifest_text(sums);
            write_file_durably(join(dir, kChecksumManifest), text.data(), text.size());
        }
        fsync_dir(dir);
    }
}

} // namespace accel::ckpt
