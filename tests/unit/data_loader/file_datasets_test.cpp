// data_loader/file_datasets and file_formats: datasets read from token, .npy and safetensors files. Each
// file loader is compared with the in-memory loader over the same values (create_from_tokens' windows or
// create_from_tensors' samples), batch for batch, shuffled, sharded and resumed; bad files must fail with
// an error naming the file, and a 4 GiB sparse corpus must be read without being loaded.
#include "checkpointing/safetensors_format.hpp"
#include "common/error.hpp"
#include "config/dataloader_options.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "data_loader/document_windows.hpp"
#include "data_loader/file_datasets.hpp"
#include "data_loader/file_formats.hpp"
#include "state/accelerator_state.hpp"
#include "catch_error.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

using accel::Batch;
using accel::DataLoaderShard;
using accel::ElemType;
using accel::TensorDataset;

namespace {

std::string temp_dir()
{
    static std::string dir = [] {
        std::string tmpl = ::testing::TempDir() + "/accel_files_XXXXXX";
        EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
        return tmpl;
    }();
    return dir;
}

std::string write_file(const std::string &name, const void *data, size_t len)
{
    const std::string path = temp_dir() + "/" + name;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(static_cast<const char *>(data), static_cast<std::streamsize>(len));
    return path;
}

std::string write_file(const std::string &name, const std::string &bytes) { return write_file(name, bytes.data(), bytes.size()); }

// The raw little-endian bytes of `values` as `type`.
std::string token_bytes(const std::vector<int64_t> &values, ElemType type)
{
    std::string out;
    for (int64_t v : values) {
        uint8_t b[8];
        std::memcpy(b, &v, 8); // little-endian host: the low bytes first
        out.append(reinterpret_cast<const char *>(b), accel::elem_size(type));
    }
    return out;
}

// A .npy file (format 1.0) with the given descr and shape text, data `bytes`.
std::string npy_bytes(const std::string &descr, const std::string &shape, const std::string &bytes,
                      const std::string &fortran = "False")
{
    std::string h = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
    while ((10 + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(h.size() & 0xff);
    out += static_cast<char>(h.size() >> 8);
    return out + h + bytes;
}

std::vector<int64_t> token_values(int64_t n, int64_t vocab)
{
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 7919 + 13) % vocab;
    return v;
}

// What accel_dataloader_create_from_tokens builds for `tokens` (windows as views of one int64 stream).
std::shared_ptr<const TensorDataset> token_windows(const std::vector<int64_t> &tokens, int64_t block, int64_t stride)
{
    at::Tensor stream = at::tensor(tokens, at::kLong);
    at::Tensor windows = stream.unfold(0, block + 1, stride);
    auto d = std::make_shared<TensorDataset>();
    d->features = windows.narrow(1, 0, block);
    d->labels = windows.narrow(1, 1, block);
    return d;
}

accel::config::DataLoaderOptions loader_options(int64_t batch_size, bool shuffle = true)
{
    accel::config::DataLoaderOptions o;
    o.batch_size = batch_size;
    o.shuffle = shuffle;
    o.seed = 1234;
    return o;
}

std::shared_ptr<const accel::Dataset> open(const std::string &json)
{
    return accel::open_file_dataset(accel::config::parse_file_dataloader_options(json.c_str()));
}

std::vector<Batch> all_batches(DataLoaderShard &loader)
{
    std::vector<Batch> out;
    while (auto b = loader.next()) out.push_back(*b);
    return out;
}

void expect_same_batches(const std::vector<Batch> &got, const std::vector<Batch> &want)
{
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(got[i].inputs.equal(want[i].inputs)) << "batch " << i;
        EXPECT_EQ(got[i].inputs.scalar_type(), want[i].inputs.scalar_type());
        EXPECT_EQ(got[i].labels.defined(), want[i].labels.defined());
        if (want[i].labels.defined()) {
            EXPECT_TRUE(got[i].labels.equal(want[i].labels)) << "batch " << i;
        }
        EXPECT_TRUE(got[i].indices.equal(want[i].indices));
    }
}

// Both loaders' whole passes (two epochs) are equal.
void expect_same_loader(std::shared_ptr<const accel::Dataset> a, std::shared_ptr<const accel::Dataset> b, int64_t batch)
{
    DataLoaderShard la(std::move(a), loader_options(batch)), lb(std::move(b), loader_options(batch));
    for (int epoch = 0; epoch < 2; ++epoch) expect_same_batches(all_batches(la), all_batches(lb));
}

void expect_error(const std::function<void()> &f, accel_status_t code, const std::string &part)
{
    accel::Error e = catch_error(f);
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
}

int64_t rss_kb()
{
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
    return -1;
}

} // namespace

// ---- .npy headers ------------------------------------------------------------------------------------

TEST(NpyHeader, ParsesWhatNumpyWrites)
{
    const std::string f = npy_bytes("<u2", "(3,)", token_bytes({1, 2, 3}, ElemType::U16));
    auto h = accel::parse_npy_header(reinterpret_cast<const uint8_t *>(f.data()), f.size(), f.size(), "x.npy");
    EXPECT_EQ(h.type, ElemType::U16);
    EXPECT_EQ(h.shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(h.data_offset, f.size() - 6); // numpy aligns the data to 64 bytes
    EXPECT_EQ(h.data_offset % 64, 0u);
    const std::string g = npy_bytes("<f4", "(2, 3)", std::string(24, '\0'));
    h = accel::parse_npy_header(reinterpret_cast<const uint8_t *>(g.data()), g.size(), g.size(), "x.npy");
    EXPECT_EQ(h.type, ElemType::F32);
    EXPECT_EQ(h.shape, (std::vector<int64_t>{2, 3}));
}

TEST(NpyHeader, RefusesLiesAndWhatItCannotRead)
{
    auto parse = [](const std::string &f) {
        accel::parse_npy_header(reinterpret_cast<const uint8_t *>(f.data()), f.size(), f.size(), "x.npy");
    };
    const std::string six = token_bytes({1, 2, 3}, ElemType::U16);
    expect_error([&] { parse(npy_bytes("<u2", "(4,)", six)); }, ACCEL_ERR_DATA_LOSS, "x.npy: npy header: its shape");
    expect_error([&] { parse(npy_bytes("<u2", "(2,)", six)); }, ACCEL_ERR_DATA_LOSS, "x.npy");
    expect_error([&] { parse(npy_bytes("<u2", "(99999999999999999,)", six)); }, ACCEL_ERR_DATA_LOSS, "x.npy");
    expect_error([&] { parse(npy_bytes("<u2", "(3,)", six, "True")); }, ACCEL_ERR_UNIMPLEMENTED, "fortran_order");
    expect_error([&] { parse(npy_bytes(">u2", "(3,)", six)); }, ACCEL_ERR_UNIMPLEMENTED, "big-endian");
    expect_error([&] { parse(npy_bytes("<c8", "(3,)", six)); }, ACCEL_ERR_UNIMPLEMENTED, "unsupported dtype");
    expect_error([&] { parse(npy_bytes("|O", "(3,)", six)); }, ACCEL_ERR_UNIMPLEMENTED, "unsupported dtype");
    expect_error([&] { parse("\x93NUMPZ\x01\x00"); }, ACCEL_ERR_DATA_LOSS, "not a .npy file");
    std::string cut = npy_bytes("<u2", "(3,)", six);
    expect_error([&] { parse(cut.substr(0, 30)); }, ACCEL_ERR_DATA_LOSS, "ends inside the header");
    std::string no_newline = cut;
    no_newline[cut.size() - 7] = ' '; // the header's last byte (6 data bytes follow)
    expect_error([&] { parse(no_newline); }, ACCEL_ERR_DATA_LOSS, "newline");
}

// ---- token streams -----------------------------------------------------------------------------------

TEST(FileDatasets, EachTokenDtypeEqualsCreateFromTokens)
{
    const int64_t block = 16, stride = 8;
    for (auto [type, vocab] : {std::pair<ElemType, int64_t>{ElemType::U8, 256}, {ElemType::U16, 50257},
                               {ElemType::I32, 100000}, {ElemType::I64, int64_t(1) << 40}}) {
        const auto tokens = token_values(1003, vocab);
        const std::string name = accel::elem_name(type);
        const std::string path = write_file(name + ".bin", token_bytes(tokens, type));
        auto files = open(R"({"format": "tokens", "files": ")" + path + R"(", "dtype": ")" + name +
                          R"(", "block_size": 16, "stride": 8})");
        EXPECT_EQ(files->size(), (1003 - 17) / 8 + 1) << name;
        expect_same_loader(files, token_windows(tokens, block, stride), 5);
    }
}

TEST(FileDatasets, ShardsAndGlobsAreOneStream)
{
    const auto tokens = token_values(3000, 50000);
    const std::string whole = write_file("whole.bin", token_bytes(tokens, ElemType::U16));
    // Three shards of unequal length: windows cross from one into the next.
    const size_t cuts[] = {0, 1001, 1999, 3000};
    for (int s = 0; s < 3; ++s) {
        std::vector<int64_t> part(tokens.begin() + static_cast<long>(cuts[s]), tokens.begin() + static_cast<long>(cuts[s + 1]));
        write_file("shard-00" + std::to_string(s) + ".bin", token_bytes(part, ElemType::U16));
    }
    const std::string dir = temp_dir();
    auto globbed = open(R"({"format": "tokens", "files": ")" + dir + R"(/shard-*.bin", "dtype": "uint16", "block_size": 64})");
    auto listed = open(R"({"format": "tokens", "files": [")" + dir + "/shard-000.bin\", \"" + dir + "/shard-001.bin\", \"" +
                       dir + R"(/shard-002.bin"], "dtype": "uint16", "block_size": 64})");
    EXPECT_EQ(globbed->size(), (3000 - 65) / 64 + 1);
    expect_same_loader(globbed, token_windows(tokens, 64, 64), 4);
    expect_same_loader(listed, token_windows(tokens, 64, 64), 4);
    // The glob is sorted: reversed listing order would give other windows.
    auto reversed = open(R"({"format": "tokens", "files": [")" + dir + "/shard-002.bin\", \"" + dir + "/shard-001.bin\", \"" +
                         dir + R"(/shard-000.bin"], "dtype": "uint16", "block_size": 64})");
    EXPECT_FALSE(reversed->get_batch(at::arange(3, at::kLong)).inputs.equal(globbed->get_batch(at::arange(3, at::kLong)).inputs));
    expect_error([&] { open(R"({"format": "tokens", "files": ")" + dir + R"(/nothing-*.bin", "dtype": "uint16", "block_size": 4})"); },
                 ACCEL_ERR_NOT_FOUND, "nothing-*.bin");
    expect_error([&] { open(R"({"format": "tokens", "files": ")" + dir + R"(/missing.bin", "dtype": "uint16", "block_size": 4})"); },
                 ACCEL_ERR_NOT_FOUND, "missing.bin");
}

TEST(FileDatasets, NpyAndSafetensorsTokenStreams)
{
    const auto tokens = token_values(777, 30000);
    const std::string npy = write_file("tokens.npy", npy_bytes("<i4", "(777,)", token_bytes(tokens, ElemType::I32)));
    expect_same_loader(open(R"({"format": "npy", "files": ")" + npy + R"(", "block_size": 10})"), token_windows(tokens, 10, 10), 3);

    const std::string data = token_bytes(tokens, ElemType::U16);
    std::vector<accel::ckpt::StWriteEntry> entries(2);
    entries[0] = {"tokens", accel::ckpt::StDtype::U16, {777}, data.size(), data.data()};
    const float other[2] = {1, 2};
    entries[1] = {"other", accel::ckpt::StDtype::F32, {2}, 8, other};
    std::string st = accel::ckpt::build_st_header(entries, nullptr);
    for (const auto &e : entries) st.append(static_cast<const char *>(e.data), e.nbytes);
    const std::string path = write_file("tokens.safetensors", st);
    expect_same_loader(open(R"({"format": "safetensors", "files": ")" + path + R"(", "tensor": "tokens", "block_size": 10})"),
                       token_windows(tokens, 10, 10), 3);
    expect_error([&] { open(R"({"format": "safetensors", "files": ")" + path + R"(", "tensor": "nope", "block_size": 10})"); },
                 ACCEL_ERR_NOT_FOUND, "no tensor \"nope\" (it holds: ");
    expect_error([&] { open(R"({"format": "npy", "files": ")" + npy + R"(", "dtype": "uint16", "block_size": 10})"); },
                 ACCEL_ERR_INVALID_ARGUMENT, "holds int32");
}

TEST(FileDatasets, BadConfigsAndFilesNameTheProblem)
{
    const std::string path = write_file("small.bin", token_bytes(token_values(11, 100), ElemType::U16));
    auto with = [&](const std::string &rest) { return [&, rest] { open(R"({"format": "tokens", "files": ")" + path + "\", " + rest + "}"); }; };
    expect_error(with(R"("dtype": "uint17", "block_size": 4)"), ACCEL_ERR_INVALID_ARGUMENT, "dtype: expected an integer type");
    expect_error(with(R"("dtype": "float32", "block_size": 4)"), ACCEL_ERR_INVALID_ARGUMENT, "got \"float32\"");
    expect_error(with(R"("block_size": 4)"), ACCEL_ERR_INVALID_ARGUMENT, "dtype: required");
    expect_error(with(R"("dtype": "uint16")"), ACCEL_ERR_INVALID_ARGUMENT, "block_size: required");
    expect_error(with(R"("dtype": "uint16", "block_size": 4, "tensor": "x")"), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
    // Windows larger than the file: 11 tokens, block_size 11 needs 12.
    expect_error(with(R"("dtype": "uint16", "block_size": 11)"), ACCEL_ERR_INVALID_ARGUMENT,
                 "11 tokens do not make one sequence of block_size + 1 = 12");
    EXPECT_EQ(open(R"({"format": "tokens", "files": ")" + path + R"(", "dtype": "uint16", "block_size": 10})")->size(), 1);
    // 22 bytes are 5.5 int32 tokens.
    expect_error(with(R"("dtype": "int32", "block_size": 2)"), ACCEL_ERR_INVALID_ARGUMENT, "small.bin\": 22 bytes are not a whole number");
    expect_error([] { accel::config::parse_file_dataloader_options(R"({"files": "a.bin"})"); }, ACCEL_ERR_INVALID_ARGUMENT,
                 "format: required");
    expect_error([] { accel::config::parse_file_dataloader_options(R"({"format": "csv"})"); }, ACCEL_ERR_INVALID_ARGUMENT,
                 "format");
}

// A file cut short after the loader opened it: the read fails naming the file (pread sees the end), where
// reading through the map would have killed the process with SIGBUS.
TEST(FileDatasets, TruncatedWhileOpenIsAnErrorNamingTheFile)
{
    const std::string path = write_file("shrinking.bin", token_bytes(token_values(100000, 60000), ElemType::U16));
    auto d = open(R"({"format": "tokens", "files": ")" + path + R"(", "dtype": "uint16", "block_size": 100})");
    EXPECT_NO_THROW(d->get_batch(at::tensor({int64_t(900)}, at::kLong)));
    ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
    expect_error([&] { d->get_batch(at::tensor({int64_t(900)}, at::kLong)); }, ACCEL_ERR_DATA_LOSS, path);
    // Windows still inside the file read as before.
    EXPECT_NO_THROW(d->get_batch(at::tensor({int64_t(1)}, at::kLong)));
}

// ---- sample tensors ----------------------------------------------------------------------------------

TEST(FileDatasets, NpyAndSafetensorsSamplesEqualTensorLoader)
{
    at::Tensor x = at::randn({37, 3, 4});
    at::Tensor y = at::arange(37, at::kLong) * 3;
    const std::string xb(static_cast<const char *>(x.data_ptr()), static_cast<size_t>(x.nbytes()));
    const std::string yb(static_cast<const char *>(y.data_ptr()), static_cast<size_t>(y.nbytes()));
    const std::string xp = write_file("x.npy", npy_bytes("<f4", "(37, 3, 4)", xb));
    const std::string yp = write_file("y.npy", npy_bytes("<i8", "(37,)", yb));
    auto mem = std::make_shared<TensorDataset>();
    mem->features = x;
    mem->labels = y;
    expect_same_loader(open(R"({"format": "npy", "features": ")" + xp + R"(", "labels": ")" + yp + "\"}"), mem, 5);

    std::vector<accel::ckpt::StWriteEntry> entries(2);
    entries[0] = {"x", accel::ckpt::StDtype::F32, {37, 3, 4}, xb.size(), xb.data()};
    entries[1] = {"y", accel::ckpt::StDtype::I64, {37}, yb.size(), yb.data()};
    std::string st = accel::ckpt::build_st_header(entries, nullptr);
    for (const auto &e : entries) st.append(static_cast<const char *>(e.data), e.nbytes);
    const std::string sp = write_file("xy.safetensors", st);
    expect_same_loader(open(R"({"format": "safetensors", "file": ")" + sp + R"(", "features": "x", "labels": "y"})"), mem, 5);

    auto no_labels = open(R"({"format": "npy", "features": ")" + xp + "\"}");
    EXPECT_FALSE(no_labels->get_batch(at::arange(2, at::kLong)).labels.defined());
    const std::string short_y = write_file("y_short.npy", npy_bytes("<i8", "(36,)", yb.substr(0, 36 * 8)));
    expect_error([&] { open(R"({"format": "npy", "features": ")" + xp + R"(", "labels": ")" + short_y + "\"}"); },
                 ACCEL_ERR_INVALID_ARGUMENT, "y_short.npy\": 36 samples");
    const std::string lying = write_file("lying.npy", npy_bytes("<f4", "(38, 3, 4)", xb));
    expect_error([&] { open(R"({"format": "npy", "features": ")" + lying + "\"}"); }, ACCEL_ERR_DATA_LOSS, "lying.npy");
    // No bytes per sample: the header alone would claim 10^12 samples.
    const std::string empty_rows = write_file("empty_rows.npy", npy_bytes("<f4", "(1000000000000, 0)", ""));
    expect_error([&] { open(R"({"format": "npy", "features": ")" + empty_rows + "\"}"); }, ACCEL_ERR_INVALID_ARGUMENT,
                 "samples of no elements");
}

// ---- sharding and resume -----------------------------------------------------------------------------

namespace {
std::shared_ptr<accel::AcceleratorState> state_of(int32_t world, int32_t rank)
{
    accel::config::AcceleratorConfig c;
    c.topology.world_size = world;
    c.topology.local_world_size = world;
    c.topology.rank = rank;
    c.topology.local_rank = rank;
    return std::make_shared<accel::AcceleratorState>(c);
}
} // namespace

// Resuming mid-epoch from a saved position (dl_state_dict.bin's dict) gives the batches the uninterrupted
// run had next, on 1 and on 2 processes (each rank its own shard), and they equal the in-memory loader's.
TEST(FileDatasets, ResumeMidEpochGivesTheUninterruptedBatches)
{
    const auto tokens = token_values(5000, 50000);
    const std::string path = write_file("resume.bin", token_bytes(tokens, ElemType::U16));
    auto files = open(R"({"format": "tokens", "files": ")" + path + R"(", "dtype": "uint16", "block_size": 32})");
    for (int32_t world : {1, 2}) {
        for (int32_t rank = 0; rank < world; ++rank) {
            DataLoaderShard full(files, loader_options(4)), memory(token_windows(tokens, 32, 32), loader_options(4));
            full.prepare(state_of(world, rank));
            memory.prepare(state_of(world, rank));
            all_batches(full); // epoch 0
            all_batches(memory);
            const auto want = all_batches(full); // epoch 1
            expect_same_batches(want, all_batches(memory));
            ASSERT_GT(want.size(), 10u);

            DataLoaderShard first(files, loader_options(4));
            first.prepare(state_of(world, rank));
            all_batches(first);
            for (int i = 0; i < 7; ++i) ASSERT_TRUE(first.next().has_value());
            auto saved = first.state_dict();

            DataLoaderShard resumed(files, loader_options(4, true));
            resumed.prepare(state_of(world, rank));
            resumed.load_state_dict(*saved, "dl_state_dict.bin")();
            auto rest = all_batches(resumed);
            expect_same_batches(rest, std::vector<Batch>(want.begin() + 7, want.end()));
        }
    }
}

// Windows that stop at document ends ("eos_token_id") go through the same sampler: shuffled, sharded on 2
// processes and resumed mid-epoch they give the uninterrupted run's batches; every batch is [n, 16], its inputs
// padded exactly where its labels are -100.
TEST(FileDatasets, DocumentWindowsResumeMidEpoch)
{
    std::vector<int64_t> tokens(3000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 7) % 53 == 0 ? 0 : static_cast<int64_t>(i % 900) + 1;
    const std::string path = write_file("docs.bin", token_bytes(tokens, ElemType::U16));
    auto files = open(R"({"format": "tokens", "files": ")" + path +
                      R"(", "dtype": "uint16", "block_size": 16, "stride": 10, "eos_token_id": 0, "pad_token_id": 7777})");
    for (int32_t world : {1, 2}) {
        for (int32_t rank = 0; rank < world; ++rank) {
            DataLoaderShard full(files, loader_options(4));
            full.prepare(state_of(world, rank));
            all_batches(full); // epoch 0
            const auto want = all_batches(full); // epoch 1
            ASSERT_GT(want.size(), 10u);
            int64_t padded = 0; // documents of 53 tokens: windows at 0, 10, 20, 30 and a short one at 40
            for (const Batch &b : want) {
                ASSERT_EQ(b.inputs.size(1), 16);
                EXPECT_TRUE(at::equal(b.inputs.eq(7777), b.labels.eq(-100)));
                padded += b.labels.eq(-100).sum().item<int64_t>();
            }
            EXPECT_GT(padded, 0);

            DataLoaderShard first(files, loader_options(4));
            first.prepare(state_of(world, rank));
            all_batches(first);
            for (int i = 0; i < 5; ++i) ASSERT_TRUE(first.next().has_value());
            auto saved = first.state_dict();
            DataLoaderShard resumed(files, loader_options(4));
            resumed.prepare(state_of(world, rank));
            resumed.load_state_dict(*saved, "dl_state_dict.bin")();
            expect_same_batches(all_batches(resumed), std::vector<Batch>(want.begin() + 5, want.end()));
        }
    }
}

// ---- a corpus larger than what is read ---------------------------------------------------------------

namespace {
// Reads `batches` batches of 8 windows spread over the whole file and returns the growth of the resident
// set in kB.
int64_t rss_growth_reading(const std::string &path, int batches)
{
    auto d = open(R"({"format": "tokens", "files": ")" + path + R"(", "dtype": "uint16", "block_size": 1024, "seed": 7})");
    DataLoaderShard loader(d, loader_options(8));
    const int64_t before = rss_kb();
    int64_t checksum = 0;
    for (int i = 0; i < batches; ++i) {
        auto b = loader.next();
        if (!b) b = loader.next();
        checksum += b->inputs.sum().item<int64_t>();
    }
    EXPECT_GE(checksum, 0);
    return rss_kb() - before;
}
} // namespace

// A sparse 4 GiB token file (a few regions written): the loader reads windows from across it and the
// resident set grows no more than 300 MB beyond a run over a 1 MB file (nothing is loaded whole).
TEST(FileDatasets, SparseFourGiBCorpusIsNotLoaded)
{
    const std::string big = temp_dir() + "/sparse4g.bin";
    const int fd = ::open(big.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, int64_t(4) << 30), 0);
    const std::string region = token_bytes(token_values(1 << 20, 50000), ElemType::U16); // 2 MiB
    for (int64_t at : {int64_t(0), int64_t(1) << 30, int64_t(3) << 30, (int64_t(4) << 30) - (int64_t(2) << 20)})
        ASSERT_EQ(::pwrite(fd, region.data(), region.size(), at), static_cast<ssize_t>(region.size()));
    ::close(fd);
    const std::string small = write_file("one_mb.bin", region.substr(0, 1 << 20));

    const int64_t small_kb = rss_growth_reading(small, 200);
    const int64_t big_kb = rss_growth_reading(big, 200);
    EXPECT_LT(big_kb - small_kb, 300 * 1024) << "4 GiB run grew " << big_kb << " kB, 1 MB run " << small_kb << " kB";
    // The windows really come from the whole file: the last region's tokens are read.
    auto d = open(R"({"format": "tokens", "files": ")" + big + R"(", "dtype": "uint16", "block_size": 1024})");
    EXPECT_EQ(d->size(), ((int64_t(2) << 30) - 1025) / 1024 + 1);
    Batch last = d->get_batch(at::tensor({d->size() - 1}, at::kLong));
    EXPECT_GT(last.inputs.sum().item<int64_t>(), 0);
    ::unlink(big.c_str());
}

// Prefetch workers read a file dataset's batches from several threads at once (pread at independent
// offsets): the batches are those of the loader without workers.
TEST(FileDatasets, WorkersGiveTheSameBatches)
{
    const auto tokens = token_values(20000, 50000);
    const std::string path = write_file("workers.bin", token_bytes(tokens, ElemType::U16));
    auto files = open(R"({"format": "tokens", "files": ")" + path + R"(", "dtype": "uint16", "block_size": 64})");
    auto with_workers = loader_options(4);
    with_workers.num_workers = 3;
    with_workers.prefetch_factor = 2;
    DataLoaderShard plain(files, loader_options(4)), threaded(files, with_workers);
    for (int epoch = 0; epoch < 2; ++epoch) expect_same_batches(all_batches(threaded), all_batches(plain));
}

// num_document_windows against the rule it states, enumerated: windows at multiples of stride while one still
// has a label, up to and including the first reaching the document's end; every label position is covered
// (for stride <= block_size), and no window repeats only tokens an earlier one covered.
TEST(FileDatasets, DocumentWindowCountFollowsItsRule)
{
    for (int64_t block = 1; block <= 6; ++block) {
        for (int64_t stride = 1; stride <= 8; ++stride) {
            for (int64_t len = 0; len <= 40; ++len) {
                int64_t n = 0, covered = 0; // labels are token positions 1 .. len - 1
                for (int64_t s = 0; s < len - 1; s += stride) {
                    ++n;
                    covered = std::max(covered, std::min(s + block, len - 1));
                    if (s + block + 1 >= len) break;
                }
                EXPECT_EQ(accel::num_document_windows(len, block, stride), n)
                    << "length " << len << ", block " << block << ", stride " << stride;
                if (stride <= block && len >= 2) {
                    EXPECT_EQ(covered, len - 1) << "length " << len;
                }
            }
        }
    }
}
