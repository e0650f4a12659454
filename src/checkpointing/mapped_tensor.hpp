// Tensors over a mapped checkpoint file that remember where their bytes lie in the file, and the batch
// of copies that load_state runs at the end: a destination whose source is still such a tensor is filled
// with pread from the file (one copy, no page-table work for the map, several threads; through a
// temporary when the dtype differs or the destination is strided), anything else with copy_.
#pragma once

#include "common/files.hpp"

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace accel::ckpt {

// A contiguous tensor of `sizes` over `file`'s map at byte `offset` (which must lie inside the file and be
// aligned for `dtype`); it keeps the file open and mapped while alive.
at::Tensor mapped_tensor(const std::shared_ptr<MappedFile> &file, size_t offset, at::IntArrayRef sizes,
                         at::ScalarType dtype);

// Copies into existing tensors, collected first and then run together. Destinations must not be read or
// written by anything else until run() returns.
class CopyBatch {
public:
    // Schedules dst.copy_(src) (same sizes; dtype converted as copy_ does). Keeps `src` alive until run().
    void add(const at::Tensor &dst, const at::Tensor &src);
    // Runs every copy (several threads when there is enough to copy). An I/O error throws after every
    // other copy has finished, so some destinations may then hold new values: only a read failing between
    // validation and copy (a disk error, the file cut short meanwhile) leaves state half loaded.
    void run();
    size_t size() const { return copies_.size(); }

private:
    struct Copy {
        at::Tensor dst, src;
        const MappedFile *file = nullptr; // non-null: read bytes [offset, offset + nbytes) with pread
        size_t offset = 0;
        bool via_temporary = false;       // pread into a temporary, then copy_ (conversion, strided dst)
    };
    using Range = std::pair<const void *, size_t>; // a destination's first byte and length
    std::vector<Copy> copies_;
    std::map<Range, size_t> by_destination_; // index into copies_
};

} // namespace accel::ckpt
