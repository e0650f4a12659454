// include/accel/accel.hpp's data loaders beyond tensors: a token file (DataLoader::from_files) gives the
// batches of the same tokens in memory (from_tokens); a MapDataset subclass gives a tensor loader's batches
// (shuffled, 0 and 2 workers); an IterableDataset of documents is packed into windows and resumed exactly from
// its state after save_state / load_state; a collate std::function and the "pad" collate's attention mask; an
// exception in a callback becomes accel::Error with its message.
//   accel_cpp_datasets_test <scratch dir>
#include <accel/accel.hpp>

#include "expect.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

using Rows = std::vector<std::vector<std::int64_t>>;

// Every batch of the rest of the pass: inputs then labels of each, as integers.
Rows drain(accel::DataLoader &dl, int max = -1)
{
    Rows out;
    for (int k = 0; max < 0 || k < max; ++k) {
        auto b = dl.next_batch();
        if (!b) break;
        out.push_back(b.inputs().dtype() == ACCEL_DTYPE_INT64 ? b.inputs().to_vector<std::int64_t>()
                                                               : std::vector<std::int64_t>{});
        if (out.back().empty())
            for (float v : b.inputs().to_vector<float>()) out.back().push_back(static_cast<std::int64_t>(v));
        out.push_back(b.labels().to_vector<std::int64_t>());
    }
    return out;
}

void test_files(const std::string &dir)
{
    std::vector<std::uint16_t> t16(600);
    std::vector<std::int64_t> t64(600);
    for (std::size_t i = 0; i < t16.size(); ++i) t64[i] = t16[i] = static_cast<std::uint16_t>((i * 7919 + 5) % 50257);
    const std::string path = dir + "/tokens.bin";
    std::FILE *f = std::fopen(path.c_str(), "wb");
    EXPECT(f != nullptr && std::fwrite(t16.data(), 2, t16.size(), f) == t16.size());
    std::fclose(f);
    const std::string keys = R"("block_size": 15, "batch_size": 4, "shuffle": true, "seed": 5)";
    auto from_file = accel::DataLoader::from_files(R"({"format": "tokens", "files": ")" + path +
                                                   R"(", "dtype": "uint16", )" + keys + "}");
    auto in_memory = accel::DataLoader::from_tokens(accel::Tensor::from(t64, {600}), "{" + keys + "}");
    EXPECT(from_file.length() == in_memory.length() && from_file.length() == (599 / 15 + 3) / 4);
    const Rows a = drain(from_file), b = drain(in_memory);
    EXPECT(a == b && a.size() == 2 * static_cast<std::size_t>(from_file.length()));
    try {
        (void)accel::DataLoader::from_files(R"({"format": "tokens", "files": ")" + path + R"(", "dtype": "u16", )" + keys + "}");
        EXPECT(!"no exception");
    } catch (const accel::Error &e) {
        EXPECT(e.status() == ACCEL_ERR_INVALID_ARGUMENT && std::string(e.what()).find("dtype") != std::string::npos);
    }
}

// Sample i: inputs {i, -i} (float), label 100 + i; get(13) throws.
struct Rows2 : accel::MapDataset {
    std::int64_t length() override { return 20; }
    accel::Sample get(std::int64_t i) override
    {
        if (i == 13 && fail) throw std::runtime_error("row 13 is missing");
        return {accel::Tensor::from(std::vector<float>{float(i), float(-i)}, {2}),
                accel::Tensor::from(std::vector<std::int64_t>{100 + i}, {})};
    }
    bool fail = false;
};

void test_map_dataset()
{
    std::vector<float> x;
    std::vector<std::int64_t> y;
    for (int i = 0; i < 20; ++i) {
        x.insert(x.end(), {float(i), float(-i)});
        y.push_back(100 + i);
    }
    auto fx = accel::Tensor::from(x, {20, 2});
    auto fy = accel::Tensor::from(y, {20});
    const std::string cfg = R"({"batch_size": 3, "shuffle": true, "seed": 7)";
    accel::DataLoader tensors(fx, &fy, cfg + "}");
    const Rows want = drain(tensors);
    for (int workers : {0, 2}) {
        auto dl = accel::DataLoader::from_map_dataset(std::make_shared<Rows2>(),
                                                      cfg + R"(, "num_workers": )" + std::to_string(workers) + "}");
        EXPECT(dl.length() == 7 && drain(dl) == want);
    }
    auto bad = std::make_shared<Rows2>();
    bad->fail = true;
    auto dl = accel::DataLoader::from_map_dataset(bad, R"({"batch_size": 20})");
    try {
        (void)dl.next_batch();
        EXPECT(!"no exception");
    } catch (const accel::Error &e) {
        EXPECT(std::string(e.what()).find("row 13 is missing") != std::string::npos);
    }

    // The caller's collate: inputs' first column only, labels as given, an all-ones mask.
    accel::CollateFn first_column = [](const std::vector<accel::Tensor> &in, const std::vector<accel::Tensor> &lab) {
        std::vector<float> col;
        std::vector<std::int64_t> l, mask(in.size(), 1);
        for (const auto &t : in) col.push_back(t.to_vector<float>()[0]);
        for (const auto &t : lab) l.push_back(static_cast<std::int64_t>(t.item()));
        const auto n = static_cast<std::int64_t>(in.size());
        return accel::Collated{accel::Tensor::from(col, {n}), accel::Tensor::from(l, {n}), accel::Tensor::from(mask, {n})};
    };
    auto mine = accel::DataLoader::from_map_dataset(std::make_shared<Rows2>(), R"({"batch_size": 4})", first_column);
    auto b = mine.next_batch();
    EXPECT((b.inputs().to_vector<float>() == std::vector<float>{0, 1, 2, 3}));
    EXPECT((b.labels().to_vector<std::int64_t>() == std::vector<std::int64_t>{100, 101, 102, 103}));
    EXPECT((b.attention_mask().to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1, 1, 1}));
}

// Documents of 1 + (d % 4) tokens 10d + k; stateful (its position is the document count).
struct Documents : accel::IterableDataset {
    std::int64_t pos = 0, end = 12, fail_at = -1;
    void set_epoch(std::int64_t) override { pos = 0; }
    std::optional<accel::Sample> next() override
    {
        if (pos == end) return std::nullopt;
        if (pos == fail_at) throw accel::Error(ACCEL_ERR_DATA_LOSS, "the document stream broke");
        std::vector<std::int64_t> doc;
        for (std::int64_t k = 0; k <= pos % 4; ++k) doc.push_back(10 * pos + k);
        ++pos;
        return accel::Sample{accel::Tensor::from(doc, {static_cast<std::int64_t>(doc.size())}), {}};
    }
    bool stateful() const override { return true; }
    std::string state() override { return std::to_string(pos); }
    void load_state(const std::string &s) override { pos = std::stoll(s); }
};

void test_iterable_packing(const std::string &dir)
{
    const std::string cfg = R"({"batch_size": 2, "packing": {"block_size": 4, "eos_token_id": -1}})";
    // The hand-packed stream: each document then -1, windows of 5 tokens 4 apart.
    std::vector<std::int64_t> stream;
    for (std::int64_t d = 0; d < 12; ++d) {
        for (std::int64_t k = 0; k <= d % 4; ++k) stream.push_back(10 * d + k);
        stream.push_back(-1);
    }
    auto packed = accel::DataLoader::from_iterable_dataset(std::make_shared<Documents>(), cfg);
    auto b = packed.next_batch();
    const auto rows = b.inputs().to_vector<std::int64_t>();
    std::vector<std::int64_t> want(stream.begin(), stream.begin() + 4);
    want.insert(want.end(), stream.begin() + 4, stream.begin() + 8);
    EXPECT(rows == want && b.inputs().shape() == (std::vector<std::int64_t>{2, 4}));

    // Resume: save after 2 batches, run on, load, and the rest of the pass repeats.
    accel::Accelerator acc("{}");
    auto model = accel::Model::from_json(R"({"type": "mlp", "widths": [4, 2]})");
    auto dl = accel::DataLoader::from_iterable_dataset(std::make_shared<Documents>(), cfg);
    acc.prepare(&model, nullptr, &dl, nullptr);
    (void)drain(dl, 2);
    acc.save_state(dir + "/packing_ckpt");
    const Rows rest = drain(dl);
    EXPECT(rest.size() >= 4);
    acc.load_state(dir + "/packing_ckpt");
    EXPECT(drain(dl) == rest);

    auto broken = std::make_shared<Documents>();
    broken->fail_at = 1;
    auto bad = accel::DataLoader::from_iterable_dataset(broken, R"({"batch_size": 2})");
    try {
        (void)bad.next_batch();
        EXPECT(!"no exception");
    } catch (const accel::Error &e) {
        EXPECT(e.status() == ACCEL_ERR_DATA_LOSS && std::string(e.what()).find("the document stream broke") != std::string::npos);
    }
}

void test_pad_collate()
{
    struct Ragged : accel::MapDataset {
        std::int64_t length() override { return 3; }
        accel::Sample get(std::int64_t i) override
        {
            return {accel::Tensor::from(std::vector<std::int64_t>(static_cast<std::size_t>(i + 1), 7), {i + 1}), {}};
        }
    };
    auto dl = accel::DataLoader::from_map_dataset(std::make_shared<Ragged>(), R"({"batch_size": 3, "collate": "pad"})");
    auto b = dl.next_batch();
    EXPECT((b.attention_mask().to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
    EXPECT((b.inputs().to_vector<std::int64_t>() == std::vector<std::int64_t>{7, 0, 0, 7, 7, 0, 7, 7, 7}));
    EXPECT((b.indices().to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2}));
}

} // namespace

int main(int argc, char **argv)
{
    const std::string dir = argc > 1 ? argv[1] : ".";
    try {
        test_files(dir);
        test_map_dataset();
        test_iterable_packing(dir);
        test_pad_collate();
    } catch (const accel::Error &e) {
        std::fprintf(stderr, "accel_cpp_datasets_test: %s: %s\n", e.status_name(), e.what());
        return 1;
    }
    std::puts("cpp datasets test passed");
    return 0;
}
