// A line-by-line port of libstdc++ 12's std::nth_element (introselect) and std::partial_sort (heap select + sort
// heap), bits/stl_algo.h and bits/stl_heap.h, for plain pointers, callable on the device. dsa_topk replays the CPU
// reference's torch.topk emulation with it, so the choice among exactly tied values is the reference's. (Calling the
// std:: functions themselves from device code under --expt-relaxed-constexpr is not an option: std::__lg's
// __builtin_clzl is a host builtin, and nvcc silently drops code that reaches it.) Host-callable too, so the port can
// be checked against the std:: originals on the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PENSTOCK_HD __host__ __device__ __forceinline__
#else
#define PENSTOCK_HD inline
#endif

namespace penstock::cuda::stl {

template <class T>
PENSTOCK_HD void iter_swap(T* a, T* b) {
    T t = *a;
    *a = *b;
    *b = t;
}

// floor(log2(n)) for n > 0 (std::__lg).
PENSTOCK_HD int lg(int64_t n) {
    int r = 0;
    while (n > 1) {
        n >>= 1;
        ++r;
    }
    return r;
}

template <class T, class C>
PENSTOCK_HD void move_median_to_first(T* result, T* a, T* b, T* c, C comp) {
    if (comp(*a, *b)) {
        if (comp(*b, *c)) {
            iter_swap(result, b);
        } else if (comp(*a, *c)) {
            iter_swap(result, c);
        } else {
            iter_swap(result, a);
        }
    } else if (comp(*a, *c)) {
        iter_swap(result, a);
    } else if (comp(*b, *c)) {
        iter_swap(result, c);
    } else {
        iter_swap(result, b);
    }
}

template <class T, class C>
PENSTOCK_HD T* unguarded_partition(T* first, T* last, T* pivot, C comp) {
    while (true) {
        while (comp(*first, *pivot)) ++first;
        --last;
        while (comp(*pivot, *last)) --last;
        if (!(first < last)) return first;
        iter_swap(first, last);
        ++first;
    }
}

template <class T, class C>
PENSTOCK_HD T* unguarded_partition_pivot(T* first, T* last, C comp) {
    T* mid = first + (last - first) / 2;
    move_median_to_first(first, first + 1, mid, last - 1, comp);
    return unguarded_partition(first + 1, last, first, comp);
}

template <class T, class C>
PENSTOCK_HD void push_heap(T* first, int64_t hole, int64_t top, T value, C comp) {
    int64_t parent = (hole - 1) / 2;
    while (hole > top && comp(first[parent], value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

template <class T, class C>
PENSTOCK_HD void adjust_heap(T* first, int64_t hole, int64_t len, T value, C comp) {
    const int64_t top = hole;
    int64_t second = hole;
    while (second < (len - 1) / 2) {
        second = 2 * (second + 1);
        if (comp(first[second], first[second - 1])) second--;
        first[hole] = first[second];
        hole = second;
    }
    if ((len & 1) == 0 && second == (len - 2) / 2) {
        second = 2 * (second + 1);
        first[hole] = first[second - 1];
        hole = second - 1;
    }
    push_heap(first, hole, top, value, comp);
}

template <class T, class C>
PENSTOCK_HD void pop_heap(T* first, T* last, T* result, C comp) {
    T value = *result;
    *result = *first;
    adjust_heap(first, int64_t{0}, static_cast<int64_t>(last - first), value, comp);
}

template <class T, class C>
PENSTOCK_HD void make_heap(T* first, T* last, C comp) {
    if (last - first < 2) return;
    const int64_t len = last - first;
    int64_t parent = (len - 2) / 2;
    while (true) {
        T value = first[parent];
        adjust_heap(first, parent, len, value, comp);
        if (parent == 0) return;
        parent--;
    }
}

template <class T, class C>
PENSTOCK_HD void heap_select(T* first, T* middle, T* last, C comp) {
    make_heap(first, middle, comp);
    for (T* i = middle; i < last; ++i) {
        if (comp(*i, *first)) pop_heap(first, middle, i, comp);
    }
}

// The heap [first, first + len) after pop_heap(first, first + len, &value) (the root replaced by `value`): the same
// moves as adjust_heap(first, 0, len, value) and its push_heap, in int indices (len < 2^31), with the two children
// of a hole read by one call of children(i) (i = 2 hole + 1, odd: first[i] and first[i + 1]; a device caller whose
// `first` is 8 bytes past a 16-byte boundary reads 8-byte entries' pairs with one 16-byte load).
template <class T, class C, class Children>
PENSTOCK_HD void replace_top(T* first, int len, T value, C comp, Children children) {
    int hole = 0, second = 0;
    while (second < (len - 1) / 2) {
        T left, right;
        children(2 * second + 1, left, right);
        second = 2 * (second + 1);
        if (comp(right, left)) {
            second--;
            first[hole] = left;
        } else {
            first[hole] = right;
        }
        hole = second;
    }
    if ((len & 1) == 0 && second == (len - 2) / 2) {
        second = 2 * (second + 1);
        first[hole] = first[second - 1];
        hole = second - 1;
    }
    int parent = (hole - 1) / 2;
    while (hole > 0 && comp(first[parent], value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

template <class T, class C>
PENSTOCK_HD void replace_top(T* first, int len, T value, C comp) {
    replace_top(first, len, value, comp, [first](int i, T& l, T& r) {
        l = first[i];
        r = first[i + 1];
    });
}

// One step of heap_select's scan without the rest of the row: `value` (the element at i) enters the heap
// [first, middle) iff it beats the root, which then leaves (heap_select moves it to i). A caller that keeps only the
// heap may skip any element that does not beat the root as it stood earlier: the root only moves up the order.
template <class T, class C>
PENSTOCK_HD void heap_select_step(T* first, T* middle, T value, C comp) {
    if (comp(value, *first)) replace_top(first, static_cast<int>(middle - first), value, comp);
}

template <class T, class C>
PENSTOCK_HD void sort_heap(T* first, T* last, C comp) {
    while (last - first > 1) {
        --last;
        pop_heap(first, last, last, comp);
    }
}

template <class T, class C>
PENSTOCK_HD void unguarded_linear_insert(T* last, C comp) {
    T val = *last;
    T* next = last - 1;
    while (comp(val, *next)) {
        *last = *next;
        last = next;
        --next;
    }
    *last = val;
}

template <class T, class C>
PENSTOCK_HD void insertion_sort(T* first, T* last, C comp) {
    if (first == last) return;
    for (T* i = first + 1; i != last; ++i) {
        if (comp(*i, *first)) {
            T val = *i;
            for (T *d = i + 1, *s = i; s != first;) *--d = *--s;  // std::move_backward(first, i, i + 1)
            *first = val;
        } else {
            unguarded_linear_insert(i, comp);
        }
    }
}

template <class T, class C>
PENSTOCK_HD void introselect(T* first, T* nth, T* last, int64_t depth_limit, C comp) {
    while (last - first > 3) {
        if (depth_limit == 0) {
            heap_select(first, nth + 1, last, comp);
            iter_swap(first, nth);  // place the nth largest element in its final position
            return;
        }
        --depth_limit;
        T* cut = unguarded_partition_pivot(first, last, comp);
        if (cut <= nth) {
            first = cut;
        } else {
            last = cut;
        }
    }
    insertion_sort(first, last, comp);
}

template <class T, class C>
PENSTOCK_HD void nth_element(T* first, T* nth, T* last, C comp) {
    if (first == last || nth == last) return;
    introselect(first, nth, last, int64_t{lg(last - first)} * 2, comp);
}

template <class T, class C>
PENSTOCK_HD void partial_sort(T* first, T* middle, T* last, C comp) {
    heap_select(first, middle, last, comp);
    sort_heap(first, middle, comp);
}

}  // namespace penstock::cuda::stl
