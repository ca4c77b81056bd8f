// Runs the fused prologue (the real sources: prologue.cuh through csrc/prologue.cu) on the host for the
// CPU test tests/attention/test_prologue.py: one fiber (ucontext) per thread of each block, switched only at
// team collectives (shuffles, __syncwarp), emulated in cuda_runtime.h here; blocks run one after another,
// the last first. Reads DIR/params.txt ("name value" lines: PrologueParams' scalars and strides, fp8_kv,
// fp8_q) and DIR/<tensor>.bin (raw bytes; absent: a null pointer), runs the kernel, writes back
// q_out.bin, q_scale.bin, k_cache.bin and v_cache.bin.
#include <cuda_runtime.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "hpc_attention/prologue.cuh"

namespace emu {
Fiber* cur;
dim3 block, grid;
uint3_ cta;
unsigned long long xbuf[kMaxThreads];
static Fiber fibers[kMaxThreads];
static ucontext_t sched;
static int count[64];
static unsigned gen[64];
static unsigned long long progress;
static const std::function<void()>* body;

void yield() { swapcontext(&cur->ctx, &sched); }

// One barrier per (warp, half): the prologue's masks are 0x0000ffff or 0xffff0000 (a 16-lane team).
void mask_barrier(unsigned mask) {
  ++progress;
  const int warp = cur->tid.x >> 5;
  if (mask != 0xffffu && mask != 0xffff0000u) {
    fprintf(stderr, "unsupported mask %08x\n", mask);
    exit(4);
  }
  const int id = warp * 2 + (mask == 0xffff0000u);
  if (!(mask >> (cur->tid.x & 31) & 1u)) {
    fprintf(stderr, "thread %u calls a collective with a mask %08x that does not name it\n", cur->tid.x, mask);
    exit(5);
  }
  const unsigned g = gen[id];
  if (++count[id] == 16) {
    count[id] = 0;
    ++gen[id];
  } else {
    while (gen[id] == g) yield();
    ++progress;
  }
}

static void entry() {
  (*body)();
  cur->done = true;
  ++progress;
}

void run_grid(dim3 g, dim3 b, const std::function<void()>& fn) {
  grid = g;
  block = b;
  body = &fn;
  const int threads = int(b.x);
  for (int c = int(g.x) - 1; c >= 0; --c) {
    cta = {unsigned(c), 0, 0};
    for (int i = 0; i < 64; ++i) count[i] = 0;
    for (int t = 0; t < threads; ++t) {
      Fiber& f = fibers[t];
      f.tid = {unsigned(t), 0, 0};
      f.done = false;
      if (f.stack.empty()) f.stack.resize(1 << 16);
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.data();
      f.ctx.uc_stack.ss_size = f.stack.size();
      f.ctx.uc_link = &sched;
      makecontext(&f.ctx, entry, 0);
    }
    while (true) {
      bool all = true;
      const unsigned long long before = progress;
      for (int t = 0; t < threads; ++t) {
        if (fibers[t].done) continue;
        all = false;
        cur = &fibers[t];
        swapcontext(&sched, &fibers[t].ctx);
      }
      if (all) break;
      if (progress == before) {
        fprintf(stderr, "deadlock: a collective that not every thread of its team reaches\n");
        exit(3);
      }
    }
  }
}
}  // namespace emu

// The kernel's dynamic shared memory (extern __shared__ float prologue_rows[]): one block at a time runs.
namespace hpc::attn {
alignas(16) float prologue_rows[hpc::attn::prologue::smem_bytes(true) / 4];
}

static std::string dir;
static std::map<std::string, std::vector<uint4>> blobs;  // 16-byte aligned storage of each tensor
static std::map<std::string, size_t> sizes;

static void* load(const std::string& name) {
  std::ifstream f(dir + "/" + name + ".bin", std::ios::binary | std::ios::ate);
  if (!f) return nullptr;
  const size_t n = size_t(f.tellg());
  auto& v = blobs[name];
  v.resize(n / 16 + 1);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n));
  sizes[name] = n;
  return v.data();
}

static void store(const std::string& name) {
  if (!blobs.count(name)) return;
  std::ofstream f(dir + "/" + name + ".bin", std::ios::binary);
  f.write(reinterpret_cast<const char*>(blobs[name].data()), std::streamsize(sizes[name]));
}

int main(int argc, char** argv) {
  using namespace hpc::attn;
  if (argc != 2) return 2;
  dir = argv[1];
  std::map<std::string, double> v;
  std::ifstream pf(dir + "/params.txt");
  std::string key;
  double val;
  while (pf >> key >> val) v[key] = val;
  PrologueParams p{};
  p.qkv = load("qkv");
  p.positions = load("positions");
  p.cos_sin = load("cos_sin");
  p.q_norm_weight = load("q_norm_weight");
  p.k_norm_weight = load("k_norm_weight");
  p.slot_mapping = load("slot_mapping");
  p.q_out = load("q_out");
  p.q_scale = static_cast<float*>(load("q_scale"));
  p.k_cache = load("k_cache");
  p.v_cache = load("v_cache");
  p.k_scale_ptr = static_cast<const float*>(load("k_scale"));
  p.v_scale_ptr = static_cast<const float*>(load("v_scale"));
#define SET(f) p.f = decltype(p.f)(v.at(#f))
  SET(qkv_stride_t); SET(cos_sin_stride); SET(q_stride_t); SET(q_stride_h); SET(q_scale_stride_t);
  SET(q_scale_stride_h); SET(k_stride_page); SET(k_stride_tok); SET(k_stride_head); SET(v_stride_page);
  SET(v_stride_tok); SET(v_stride_head); SET(num_slots); SET(page_size); SET(k_scale); SET(v_scale);
  SET(num_tokens); SET(num_qo_heads); SET(num_kv_heads); SET(max_pos); SET(rotary_dim); SET(neox); SET(eps);
  SET(positions_i64); SET(slots_i64); SET(cos_sin_f32); SET(norm_f32); SET(cos_sin_vec);
#undef SET
  const cudaError_t e = run_qk_norm_rope_store(p, v.at("fp8_kv") != 0, v.at("fp8_q") != 0, nullptr, false);
  if (e != cudaSuccess) {
    fprintf(stderr, "run_qk_norm_rope_store: error %d\n", e);
    return 1;
  }
  for (const char* name : {"q_out", "q_scale", "k_cache", "v_cache"}) store(name);
  return 0;
}
