// Standalone Verilator driver of the FDPU system top (fdpu_system): a speed benchmark without
// cocotb.  The external memory is loaded by $readmemh (the build sets the bank's INIT_FILE);
// the replay script written by scripts/speed/make_job.py gives the memory model registers and
// the phases.  Per phase the driver sets the registers, pulses the start input for one rising
// edge and clocks until the halt output rises (or the phase's bound: then it reports
// "timeout ... deadlock" and exits 3), then one more edge, exactly as tb/top/bench_run.py does.
//
//   Vfdpu_system JOB.txt [--idle N]      (--idle: after reset, N idle cycles and no job)
//   Vfdpu_system JOB.txt --compute-cycles N   (the first N cycles of the first compute phase,
//                                              then stop: a long layer's busy rate)
//
// Prints one JSON line: cycles and wall seconds per phase, cycles per wall and per CPU second
// (with --threads N the CPU time is the sum over threads), the hardware counters at the end.
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "Vfdpu_system.h"
#include "verilated.h"

static Vfdpu_system* top;
static uint64_t cycles = 0;

static inline void tick() {
    top->clk = 0;
    top->eval();
    top->clk = 1;
    top->eval();
    ++cycles;
}

static double now() {
    return std::chrono::duration<double>(
        std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Process CPU seconds: the machine is shared, so wall-clock rates vary with the load.
static double cpu() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void set_reg(const std::string& name, uint64_t v) {
    if (name == "i_n_config") top->i_n_config = v;
    else if (name == "i_n_ctx") top->i_n_ctx = v;
    else if (name == "i_contexts") top->i_contexts = v;
    else if (name == "i_window") top->i_window = v;
    else if (name == "i_ends") top->i_ends = v;
    else if (name == "i_cbuf_words") top->i_cbuf_words = v;
    else if (name == "i_ctx_base") top->i_ctx_base = v;
    else if (name == "i_keep") top->i_keep = v;
    else if (name == "i_end_base") top->i_end_base = v;
    else if (name == "i_ctx_gate") top->i_ctx_gate = v;
    else if (name == "i_gate_shift") top->i_gate_shift = v;
    else {
        std::fprintf(stderr, "driver: unknown register %s\n", name.c_str());
        std::exit(2);
    }
}

// Clock until `halt` reads 1 after an edge, at most `bound` edges; return the edges waited.
template <typename F>
static uint64_t wait_halt(F halt, uint64_t bound, const char* what) {
    uint64_t waited = 0;
    while (!halt()) {
        if (waited >= bound) {
            std::fprintf(stderr, "driver: timeout after %llu cycles in %s: deadlock? state %u "
                         "dma_state %u issued %u retired %u\n", (unsigned long long)waited,
                         what, (unsigned)top->o_state, (unsigned)top->o_dma_state,
                         (unsigned)top->o_issued, (unsigned)top->o_retired);
            std::exit(3);
        }
        tick();
        ++waited;
    }
    tick();
    return waited;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s JOB.txt [--idle N | --compute-cycles N]\n", argv[0]);
        return 2;
    }
    long idle = -1, compute_cycles = -1;
    for (int i = 2; i + 1 < argc; ++i)
        if (!std::strcmp(argv[i], "--idle")) idle = std::atol(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--compute-cycles")) compute_cycles = std::atol(argv[i + 1]);
    std::ifstream job(argv[1]);
    if (!job) {
        std::fprintf(stderr, "driver: cannot read %s\n", argv[1]);
        return 2;
    }
    auto* ctx = new VerilatedContext;
    const char* vargs[] = {argv[0]};
    ctx->commandArgs(1, vargs);
    double t_init = now();
    top = new Vfdpu_system{ctx};
    std::string line, kind;
    std::getline(job, line);
    {
        std::istringstream in(line);
        unsigned lat, bw, stall;
        in >> kind >> lat >> bw >> stall;
        top->i_mem_latency = lat;
        top->i_mem_bw = bw;
        top->i_mem_stall = stall;
    }
    top->rst = 1;
    tick();
    tick();
    top->rst = 0;
    tick();
    t_init = now() - t_init;
    std::printf("{\"init_s\": %.3f", t_init);
    double t0 = now(), p0 = cpu();
    uint64_t c0 = cycles;
    if (idle >= 0) {
        for (long i = 0; i < idle; ++i) tick();
    } else {
        std::getline(job, line);  // "words N" and the words: loaded by $readmemh already
        uint64_t words = std::strtoull(line.c_str() + 6, nullptr, 10);
        for (uint64_t i = 0; i < words; ++i) std::getline(job, line);
        int n = 0;
        std::printf(", \"phases\": [");
        while (std::getline(job, line) && line != "end") {
            std::istringstream in(line);
            uint64_t bound;
            in >> kind >> bound;
            uint64_t before = top->o_clock;
            double ts = now();
            uint64_t cs = cycles;
            if (kind == "dma") {
                uint64_t lst, count;
                in >> lst >> count;
                top->i_dma_list = lst;
                top->i_dma_count = count;
                top->i_dma_start = 1;
                tick();
                top->i_dma_start = 0;
                wait_halt([] { return top->o_dma_halt; }, bound, "dma");
            } else {
                std::string kv;
                while (in >> kv) {
                    auto eq = kv.find('=');
                    set_reg(kv.substr(0, eq), std::strtoull(kv.c_str() + eq + 1, nullptr, 10));
                }
                top->i_start = 1;
                tick();
                top->i_start = 0;
                if (compute_cycles >= 0) {              // the first N cycles only, then stop
                    for (long i = 0; i < compute_cycles && !top->o_halt; ++i) tick();
                    std::printf("%s{\"phase\": \"compute\", \"cycles\": %llu, \"s\": %.3f, "
                                "\"partial\": %s}", n++ ? ", " : "",
                                (unsigned long long)(top->o_clock - before), now() - ts,
                                top->o_halt ? "false" : "true");
                    break;
                }
                wait_halt([] { return top->o_halt; }, bound, "compute");
                if (!top->o_done || top->o_error) {
                    std::fprintf(stderr, "driver: compute ended with error %u\n",
                                 (unsigned)top->o_error);
                    return 4;
                }
            }
            std::printf("%s{\"phase\": \"%s\", \"cycles\": %llu, \"s\": %.3f}", n++ ? ", " : "",
                        kind.c_str(), (unsigned long long)(top->o_clock - before),
                        now() - ts);
            (void)cs;
        }
        std::printf("]");
    }
    double wall = now() - t0, cpu_s = cpu() - p0;
    uint64_t ran = cycles - c0;
    std::printf(", \"cpu_s\": %.3f, \"cycles_per_cpu_s\": %.0f", cpu_s, ran / cpu_s);
    std::printf(", \"mode\": \"%s\", \"cycles\": %llu, \"wall_s\": %.3f, \"cycles_per_s\": %.0f, "
                "\"o_cycles\": %llu, \"o_issued\": %u, \"o_retired\": %u, \"o_mesh_flits\": %llu, "
                "\"o_ext_wr_bytes\": %llu}\n", idle >= 0 ? "idle" : "busy",
                (unsigned long long)ran, wall, ran / wall, (unsigned long long)top->o_cycles,
                (unsigned)top->o_issued, (unsigned)top->o_retired,
                (unsigned long long)top->o_mesh_flits, (unsigned long long)top->o_ext_wr_bytes);
    top->final();
    delete top;
    delete ctx;
    return 0;
}
