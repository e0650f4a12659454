// checkpointing/integrity: the records of a checkpoint's files (every one-byte change of a record is found), the
// files checked against them (missing, truncated, grown, damaged: DATA_LOSS naming the file), torch archives'
// zip CRC-32 (a flipped storage byte is DATA_LOSS naming the member; ACCEL_CHECKPOINT_VERIFY=0 skips it), and a
// save's notes merged into accel_checksums.json and a SHARDED metadata.json.
#include "checkpointing/integrity.hpp"
#include "checkpointing/sharded_folder.hpp"
#include "checkpointing/torch_archive.hpp"
#include "common/error.hpp"
#include "common/files.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fresh_dir.hpp"

#include <cstdlib>
#include <fstream>
#include <unistd.h>

using namespace accel;
using namespace accel::ckpt;

namespace {

void put(const std::string &path, const std::string &bytes) { write_file_durably(path, bytes.data(), bytes.size()); }

std::string get(const std::string &path) { return read_small_file(path, 1u << 30); }

// The status and message of `f`'s failure (ACCEL_OK when it succeeds).
template <class F> std::pair<accel_status_t, std::string> outcome(F f)
{
    try {
        f();
    } catch (const Error &e) {
        return {e.code(), e.what()};
    }
    return {ACCEL_OK, ""};
}

struct VerifyOff {
    VerifyOff() { ::setenv("ACCEL_CHECKPOINT_VERIFY", "0", 1); }
    ~VerifyOff() { ::unsetenv("ACCEL_CHECKPOINT_VERIFY"); }
};

} // namespace

TEST(CheckpointIntegrity, ManifestRoundTripAndEveryByteChangeIsFound)
{
    const FileSums sums{{"model.safetensors", {1234, 0xdeadbeef}}, {"random_states_0.pkl", {0, 0}}};
    const std::string text = manifest_text(sums);
    const FileSums back = parse_manifest(text, "m.json");
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back.at("model.safetensors").size, 1234u);
    EXPECT_EQ(back.at("model.safetensors").crc32, 0xdeadbeefu);
    for (size_t i = 0; i < text.size(); ++i) {
        std::string bad = text;
        bad[i] = static_cast<char>(bad[i] ^ 0x01);
        auto [code, msg] = outcome([&] { parse_manifest(bad, "m.json"); });
        EXPECT_EQ(code, ACCEL_ERR_DATA_LOSS) << "byte " << i << " changed: " << bad;
        EXPECT_NE(msg.find("m.json"), std::string::npos) << msg;
    }
    // A record without the checksums, or naming a path outside its folder, is refused.
    EXPECT_EQ(outcome([] { parse_manifest("{\"format\": \"accel.checksums\", \"version\": 1}", "m.json"); }).first,
              ACCEL_ERR_DATA_LOSS);
    const std::string outside = manifest_text({{"../x", {1, 1}}});
    EXPECT_EQ(outcome([&] { parse_manifest(outside, "m.json"); }).first, ACCEL_ERR_DATA_LOSS);
}

TEST(CheckpointIntegrity, FilesAreCheckedAgainstTheirRecord)
{
    const std::string dir = fresh_dir("files");
    put(join(dir, "a.bin"), std::string(100000, 'a'));
    put(join(dir, "b.bin"), "bytes");
    const FileSums sums{{"a.bin", file_sum(join(dir, "a.bin"))}, {"b.bin", file_sum(join(dir, "b.bin"))}};
    EXPECT_EQ(outcome([&] { verify_files(dir, sums); }).first, ACCEL_OK);
    auto expect_named = [&](const char *what, const std::string &needle) {
        auto [code, msg] = outcome([&] { verify_files(dir, sums); });
        EXPECT_EQ(code, ACCEL_ERR_DATA_LOSS) << what;
        EXPECT_NE(msg.find("a.bin"), std::string::npos) << what << ": " << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << what << ": " << msg;
        put(join(dir, "a.bin"), std::string(100000, 'a'));
    };
    std::string flipped(100000, 'a');
    flipped[50000] = 'b';
    put(join(dir, "a.bin"), flipped);
    expect_named("flipped", "damaged");
    put(join(dir, "a.bin"), std::string(99999, 'a'));
    expect_named("truncated", "truncated");
    put(join(dir, "a.bin"), std::string(100001, 'a'));
    expect_named("grown", "grown");
    remove_all(join(dir, "a.bin"));
    expect_named("missing", "missing");
    // The manifest of a folder is what verify_folder_manifest reads; without one nothing is checked.
    EXPECT_EQ(outcome([&] { verify_folder_manifest(dir); }).first, ACCEL_OK);
    put(join(dir, kChecksumManifest), manifest_text(sums));
    put(join(dir, "b.bin"), "bytez");
    EXPECT_EQ(outcome([&] { verify_folder_manifest(dir); }).first, ACCEL_ERR_DATA_LOSS);
    EXPECT_EQ(outcome([&] { verify_folder_manifest(dir, [](const std::string &n) { return n != "b.bin"; }); }).first, ACCEL_OK);
    VerifyOff off;
    EXPECT_EQ(outcome([&] { verify_folder_manifest(dir); }).first, ACCEL_OK);
    remove_all(dir);
}

TEST(CheckpointIntegrity, ZipCrcOfTorchArchives)
{
    const std::string dir = fresh_dir("zip");
    const std::string path = join(dir, "t.pt");
    auto d = py_dict();
    py_set(*d, "w", py_tensor(at::arange(4096, at::kFloat)));
    save_torch_file(path, *d);
    {
        const MappedFile f(path);
        const auto members = zip_members(f.data(), f.size(), path);
        bool has_pkl = false, has_storage = false;
        for (const auto &m : members) {
            has_pkl = has_pkl || m.name.find("data.pkl") != std::string::npos;
            has_storage = has_storage || (m.name.find("data/0") != std::string::npos && m.size == 4096 * 4);
        }
        EXPECT_TRUE(has_pkl && has_storage);
    }
    EXPECT_EQ(outcome([&] { load_torch_file(path); }).first, ACCEL_OK);
    std::string bytes = get(path);
    const size_t at = bytes.find(std::string("\x00\x00\x80\x44", 4)); // 1024.0f, inside the storage
    ASSERT_NE(at, std::string::npos);
    bytes[at + 3] = '\x45';
    put(path, bytes);
    auto [code, msg] = outcome([&] { load_torch_file(path); });
    EXPECT_EQ(code, ACCEL_ERR_DATA_LOSS);
    EXPECT_NE(msg.find("data/0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("t.pt"), std::string::npos) << msg;
    {
        VerifyOff off; // skipped: the damaged value loads (what the check is there to prevent)
        PyRef back = load_torch_file(path);
        EXPECT_NE(back->get("w")->tensor[256].item<float>(), 1024.0f);
    }
    // Anything that is not a zip archive is DATA_LOSS, never a crash.
    for (const std::string &junk : {std::string(), std::string("PK\x05\x06", 4) + std::string(18, '\xff'), bytes.substr(0, bytes.size() / 2)}) {
        put(path, junk);
        EXPECT_EQ(outcome([&] { load_torch_file(path); }).first, ACCEL_ERR_DATA_LOSS);
    }
    remove_all(dir);
}

TEST(CheckpointIntegrity, SealedFolderRecordsEveryWrittenFile)
{
    const std::string tmp = fresh_dir("seal");
    make_dirs(join(tmp, "sub"));
    make_dirs(join(tmp, "shard"));
    put(join(tmp, "top.bin"), "top");
    put(join(tmp, "sub/x.pt"), "xx");
    const std::string meta = "{\n  \"format\": \"" + std::string(kShardedFormat) + "\",\n  \"version\": 1\n}\n";
    put(join(tmp, "shard/metadata.json"), meta);
    put(join(tmp, "shard/rank0.safetensors"), "r0");
    note_written_files(tmp, {"top.bin", "shard/metadata.json"});
    // A second process's note (another name), with a file both wrote.
    put(join(tmp, ".accel-crc-otherhost-1"), "? ? top.bin\n00000000 2 sub/x.pt\n00000000 2 shard/rank0.safetensors\n");
    seal_checkpoint_folder(tmp);
    for (const auto &name : list_dir(tmp)) EXPECT_EQ(name.rfind(".accel-crc-", 0), std::string::npos) << name;
    const FileSums top = parse_manifest(get(join(tmp, kChecksumManifest)), "top");
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top.at("top.bin").size, 3u); // read again: written by two processes, one could not read it back
    EXPECT_EQ(outcome([&] { verify_folder_manifest(tmp); }).first, ACCEL_OK);
    EXPECT_EQ(outcome([&] { verify_folder_manifest(join(tmp, "sub")); }).first, ACCEL_ERR_DATA_LOSS); // noted CRC 0
    const std::string sealed = get(join(tmp, "shard/metadata.json"));
    const JsonValue root = parse_json(sealed.data(), sealed.size(), "meta");
    auto sums = read_sealed_checksums(sealed, root, "meta");
    ASSERT_TRUE(sums.has_value());
    EXPECT_EQ(sums->size(), 1u);
    EXPECT_EQ(sums->count("rank0.safetensors"), 1u);
    EXPECT_FALSE(exists(join(join(tmp, "shard"), kChecksumManifest)));
    remove_all(tmp);
}
