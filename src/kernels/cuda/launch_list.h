/* The launches a recorded step has made so far (backend_cuda.cu): closures kept in order,
 * run in order when the step has to be captured into a new graph, dropped otherwise.
 *
 * Why not a std::vector<std::function<void()>>: a decode step records hundreds of ops, and
 * a std::function whose closure is larger than its small buffer (16 bytes in libstdc++;
 * most ops capture more) allocates on the heap and frees again at the step's end, all on
 * the host while the GPU waits for the step's graph (docs/cuda.md 4). Here closures are
 * placement-constructed one after another in blocks that are kept across steps, so a step
 * that replays a graph allocates nothing once the blocks have grown to a step's size. */
#ifndef LS_KERNELS_CUDA_LAUNCH_LIST_H
#define LS_KERNELS_CUDA_LAUNCH_LIST_H

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace ls::cuda {

class LaunchList {
  public:
    LaunchList() = default;
    LaunchList(const LaunchList &) = delete;
    LaunchList &operator=(const LaunchList &) = delete;
    ~LaunchList() { clear(); }

    template <class F> void push(F &&f) {
        using C = typename std::decay<F>::type;
        static_assert(alignof(C) <= kAlign, "a closure needs more alignment than the blocks give");
        if (items_.size() == items_.capacity()) /* may throw: before the closure exists */
            items_.reserve(items_.empty() ? 256 : 2 * items_.capacity());
        void *at = take(sizeof(C));
        new (at) C(std::forward<F>(f));
        items_.push_back({&run_one<C>, &destroy_one<C>, at});
    }
    void run_all() {
        for (const Item &it : items_) it.run(it.obj);
    }
    bool empty() const { return items_.empty(); }
    std::size_t size() const { return items_.size(); }
    /* Destroys the closures (they may own shared state); keeps the blocks. */
    void clear() {
        for (const Item &it : items_) it.destroy(it.obj);
        items_.clear();
        block_ = 0;
        used_ = 0;
    }

  private:
    /* Type erasure by two plain functions per closure type (no virtual functions: their
     * typeinfo would be global symbols outside the ls namespace, tests/check_symbols.sh). */
    struct Item {
        void (*run)(void *);
        void (*destroy)(void *);
        void *obj;
    };
    template <class C> static void run_one(void *p) { (*static_cast<C *>(p))(); }
    template <class C> static void destroy_one(void *p) { static_cast<C *>(p)->~C(); }
    static constexpr std::size_t kAlign = alignof(std::max_align_t);
    static constexpr std::size_t kBlock = 64 * 1024;

    /* n bytes, kAlign-aligned, in the current block or the next one (grown as needed). */
    void *take(std::size_t n) {
        n = (n + kAlign - 1) / kAlign * kAlign;
        if (block_ < blocks_.size() && used_ + n > size_of(block_)) {
            block_++;
            used_ = 0;
        }
        if (block_ == blocks_.size()) {
            const std::size_t sz = n > kBlock ? n : kBlock;
            blocks_.push_back({std::unique_ptr<unsigned char[]>(new unsigned char[sz]), sz});
        } else if (n > size_of(block_)) { /* a kept block too small for this closure */
            blocks_[block_] = {std::unique_ptr<unsigned char[]>(new unsigned char[n]), n};
        }
        void *p = blocks_[block_].mem.get() + used_;
        used_ += n;
        return p;
    }
    std::size_t size_of(std::size_t b) const { return blocks_[b].size; }

    struct Block {
        std::unique_ptr<unsigned char[]> mem;
        std::size_t size;
    };
    std::vector<Block> blocks_;
    std::vector<Item> items_;
    std::size_t block_ = 0, used_ = 0;
};

} // namespace ls::cuda

#endif
