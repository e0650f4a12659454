#include "parallel/tensor_parallel/split_outputs.hpp"

#include "parallel/output_marks.hpp"

#include <utility>

namespace accel::parallel::tp {

namespace {
OutputMarks<VocabParallelOutput> &marks()
{
    static OutputMarks<VocabParallelOutput> m;
    return m;
}
} // namespace

void mark_vocab_parallel(const at::Tensor &logits, VocabParallelOutput info) { marks().mark(logits, std::move(info)); }

std::optional<VocabParallelOutput> vocab_parallel_of(const at::Tensor &outputs) { return marks().find(outputs); }

} // namespace accel::parallel::tp
