#include "data_loader/batch_sampler_shard.hpp"

#include "common/error.hpp"

namespace accel {

IndexBatches make_batches(const std::vector<int64_t> &order, int64_t batch_size, bool drop_last)
{
    IndexBatches out;
    const auto n = static_cast<int64_t>(order.size());
    for (int64_t start = 0; start < n; start += batch_size) {
        int64_t end = std::min(n, start + batch_size);
        if (end - start < batch_size && drop_last) break;
        out.emplace_back(order.begin() + start, order.begin() + end);
    }
    return out;
}

namespace {

std::vector<int64_t> slice(const std::vector<int64_t> &v, int64_t begin, int64_t end)
{
    begin = std::min<int64_t>(begin, static_cast<int64_t>(v.size()));
    end = std::min<int64_t>(end, static_cast<int64_t>(v.size()));
    return std::vector<int64_t>(v.begin() + begin, v.begin() + end);
}

// split_batches: every global batch is cut into num_processes pieces.
IndexBatches split(const IndexBatches &inner, int64_t batch_size, bool drop_last, const ShardSpec &s)
{
    const int64_t piece = batch_size / s.num_processes, r = s.process_index;
    IndexBatches out;
    for (const auto &b : inner)
        if (static_cast<int64_t>(b.size()) == batch_size) out.push_back(slice(b, piece * r, piece * (r + 1)));
    if (drop_last || inner.empty() || static_cast<int64_t>(inner.back().size()) == batch_size) return out;
    const auto &last = inner.back();
    if (!s.even_batches) {
        if (static_cast<int64_t>(last.size()) > piece * r) out.push_back(slice(last, piece * r, piece * (r + 1)));
        return out;
    }
    // Pad the short last batch with samples from the start of the data.
    std::vector<int64_t> initial = inner.front();
    while (static_cast<int64_t>(initial.size()) < batch_size) { const auto copy = initial; initial.insert(initial.end(), copy.begin(), copy.end()); } // not from itself: UB
    std::vector<int64_t> padded = last;
    padded.insert(padded.end(), initial.begin(), initial.end());
    out.push_back(slice(padded, piece * r, piece * (r + 1)));
    return out;
}

// Round-robin: global batch k goes to process k % P; only complete rounds are yielded in the loop.
IndexBatches round_robin(const IndexBatches &inner, int64_t batch_size, bool drop_last, const ShardSpec &s)
{
    const int64_t P = s.num_processes, r = s.process_index;
    IndexBatches out;
    std::vector<int64_t> initial, pending;
    int64_t idx = 0;
    for (; idx < static_cast<int64_t>(inner.size()); ++idx) {
        const auto &b = inner[idx];
        if (!drop_last && idx < P) initial.insert(initial.end(), b.begin(), b.end());
        if (idx % P == r) pending = b;
        if (idx % P == P - 1 && static_cast<int64_t>(b.size()) == batch_size) {
            out.push_back(pending);
            pending.clear();
        }
    }
    if (drop_last || initial.empty()) return out;
    if (!s.even_batches) {
        if (!pending.empty()) out.push_back(pending);
        return out;
    }
    if (static_cast<int64_t>(pending.size()) == batch_size) out.push_back(pending);
    // Fill the rest of the last round from the start of the data so every process gets full batches.
    while (static_cast<int64_t>(initial.size()) < P * batch_size) { const auto copy = initial; initial.insert(initial.end(), copy.begin(), copy.end()); } // not from itself: UB
    idx -= 1;
    std::vector<int64_t> batch = inner.back();
    if (static_cast<int64_t>(batch.size()) == batch_size) { // already yielded by its process
        batch.clear();
        idx += 1;
    }
    int64_t cycle = 0;
    while (idx % P != 0 || !batch.empty()) {
        int64_t end = cycle + batch_size - static_cast<int64_t>(batch.size());
        auto fill = slice(initial, cycle, end);
        batch.insert(batch.end(), fill.begin(), fill.end());
        if (idx % P == r) out.push_back(batch);
        cycle = end;
        batch.clear();
        idx += 1;
    }
    return out;
}

} // namespace

IndexBatches shard_batches(const IndexBatches &inner, int64_t batch_size, bool drop_last, const ShardSpec &spec)
{
    if (spec.num_processes == 1) return inner;
    if (spec.split_batches) {
        if (batch_size % spec.num_processes != 0) // BatchSamplerShard rejects 1 too: its piece would be empty
            fail(ACCEL_ERR_INVALID_ARGUMENT, "batch_size: with split_batches it must be a multiple of the number of "
                                             "processes (" + std::to_string(spec.num_processes) + "), got " +
                                                 std::to_string(batch_size));
        return split(inner, batch_size, drop_last, spec);
    }
    return round_robin(inner, batch_size, drop_last, spec);
}

int64_t sharded_length(int64_t num_samples, int64_t batch_size, bool drop_last, const ShardSpec &s)
{
    const int64_t inner = drop_last ? num_samples / batch_size : (num_samples + batch_size - 1) / batch_size;
    if (s.num_processes == 1 || s.split_batches) {
        if (s.split_batches && !s.even_batches && !drop_last && num_samples % batch_size != 0) {
            // The short last batch may leave later processes without a piece.
            const int64_t piece = batch_size / s.num_processes;
            return inner - 1 + ((num_samples % batch_size) > piece * s.process_index ? 1 : 0);
        }
        return inner;
    }
    const int64_t P = s.num_processes;
    if (inner % P == 0) return inner / P;
    if (drop_last) return inner / P;
    if (s.even_batches) return inner / P + 1;
    return inner / P + (s.process_index < inner % P ? 1 : 0);
}

} // namespace accel
