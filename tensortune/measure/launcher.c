// tensortune's parallel launcher for TVM kernels: tasks go to whichever thread asks first.
//
// tt_parallel_launch has TVMBackendParallelLaunch's signature (tvm/runtime/c_backend_api.h);
// a kernel library calls through its __TVMBackendParallelLaunch pointer, which
// tensortune.measure.launcher points here after TVM has loaded the library. A launch is split
// into tasks_per_launch tasks; the launching thread takes them from the front, the first
// worker from the back (each runs neighbouring tasks: the chunks that share a weight panel),
// and the launching thread waits only for tasks another thread has begun, so a worker that
// another process keeps off its core holds nothing back.
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

typedef struct {
  FTVMParallelLambda fn;
  void* cdata;
  TVMParallelGroupEnv env;
  _Atomic int done;
  _Atomic int error;
} Job;

static Job jobs[2];
static _Atomic uint64_t state;        // generation << 32 | back << 16 | front (see claim)
static _Atomic uint32_t wake_gen;     // futex word: the generation last posted
static _Atomic int sleepers;
static uint32_t generation;           // the launching thread's own count
// a worker polls this many times (about 10 ms) for the next launch, then sleeps on a futex
static int n_threads = 1, tasks_per_launch = 1, spin_count = 200000;
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int inside;           // a task that launches runs its tasks itself
_Atomic long tt_launches;             // launches so far (read by the tests)

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

// state: generation << 32 | back << 16 | front. The launching thread takes tasks from the
// front, the first worker from the back: each runs neighbouring tasks (a kernel's parallel
// chunks that share a weight panel) until the two meet.
static void claim(uint32_t gen, int from_back) {
  Job* job = &jobs[gen & 1];
  for (;;) {
    uint64_t v = atomic_load_explicit(&state, memory_order_acquire);
    if ((uint32_t)(v >> 32) != gen) return;
    uint32_t front = (uint32_t)(v & 0xffff), back = (uint32_t)((v >> 16) & 0xffff);
    if (front >= back) return;
    uint32_t idx;
    uint64_t next;
    if (from_back) {
      idx = back - 1;
      next = (v & ~((uint64_t)0xffff << 16)) | ((uint64_t)idx << 16);
    } else {
      idx = front;
      next = v + 1;
    }
    if (!atomic_compare_exchange_weak_explicit(&state, &v, next, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    inside = 1;
    if (job->fn((int)idx, &job->env, job->cdata) != 0) atomic_store(&job->error, 1);
    inside = 0;
    atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
  }
}

static void* worker(void* arg) {
  int from_back = (int)(intptr_t)arg == 1;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = atomic_load_explicit(&wake_gen, memory_order_acquire);
    for (int i = 0; g == seen && i < spin_count; ++i) {
      cpu_relax();
      g = atomic_load_explicit(&wake_gen, memory_order_acquire);
    }
    while (g == seen) {
      atomic_fetch_add(&sleepers, 1);
      syscall(SYS_futex, &wake_gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
      atomic_fetch_sub(&sleepers, 1);
      g = atomic_load_explicit(&wake_gen, memory_order_acquire);
    }
    seen = g;
    claim(g, from_back);
  }
  return NULL;
}

int tt_pool_init(int threads, int tasks_per_thread, int spins) {
  if (n_threads > 1 || threads < 2) return 0;  // once; one thread needs no workers
  n_threads = threads;
  tasks_per_launch = threads * (tasks_per_thread > 0 ? tasks_per_thread : 1);
  if (spins >= 0) spin_count = spins;
  for (int i = 1; i < threads; ++i) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void*)(intptr_t)i) != 0) return -1;
    pthread_detach(t);
  }
  return 0;
}

int tt_parallel_launch(FTVMParallelLambda fn, void* cdata, int num_task) {
  atomic_fetch_add(&tt_launches, 1);
  int n = num_task > 0 ? num_task : tasks_per_launch;
  // a nested launch, one thread, more tasks than the state's 16-bit indices hold, or another
  // thread launching at the same time: the tasks run here, in order
  if (inside || n_threads < 2 || n > 0xffff || pthread_mutex_trylock(&launch_lock) != 0) {
    TVMParallelGroupEnv env = {NULL, n};
    int err = 0;
    for (int t = 0; t < n; ++t) err |= fn(t, &env, cdata);
    return err ? -1 : 0;
  }
  uint32_t gen = ++generation;
  if (gen == 0) gen = ++generation;  // 0 is the workers' initial "seen"
  Job* job = &jobs[gen & 1];
  job->fn = fn;
  job->cdata = cdata;
  job->env.sync_handle = NULL;
  job->env.num_task = n;
  atomic_store_explicit(&job->done, 0, memory_order_relaxed);
  atomic_store_explicit(&job->error, 0, memory_order_relaxed);
  atomic_store_explicit(&state, (uint64_t)gen << 32 | (uint64_t)n << 16, memory_order_release);
  atomic_store_explicit(&wake_gen, gen, memory_order_release);
  if (atomic_load(&sleepers) > 0) syscall(SYS_futex, &wake_gen, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
  claim(gen, 0);
  // every task is claimed; wait for those another thread is still running
  for (int i = 0; atomic_load_explicit(&job->done, memory_order_acquire) < n; ++i) {
    if (i < 4096) cpu_relax(); else sched_yield();
  }
  int err = atomic_load(&job->error);
  pthread_mutex_unlock(&launch_lock);
  return err ? -1 : 0;
}
