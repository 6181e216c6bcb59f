// The GPT-2 model: whole-model gradients against finite differences (one random direction per
// parameter group), fast kernels against the reference loops, per-operator execution with a block
// dropped and recomputed from its checkpoint, a linear run as tiles inside the model, and the
// embedding and the head run as vocabulary tiles.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/kernel_activations.hpp"
#include "engine/model/gpt2.hpp"
#include "models/gpt.hpp"

using zinf::engine::GradBuf;
using zinf::engine::Gpt2;
using zinf::engine::Gpt2Activations;
using zinf::engine::Gpt2Params;
using zinf::engine::KernelImpl;
using zinf::engine::ParamBuf;

namespace {

zinf::core::ModelSpec micro_spec() {
  zinf::core::ModelSpec s;
  s.name = "gpt-micro";
  s.layers = 2;
  s.hidden = 8;
  s.heads = 2;
  s.seq = 5;
  s.vocab = 13;
  s.micro_batch = 2;
  return s;
}

void set_random_batch(const Gpt2& m, Gpt2Activations& a, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto T = size_t(m.graph().tokens);
  std::vector<int32_t> in(T), tgt(T);
  for (size_t i = 0; i < T; ++i) in[i] = int32_t(rng() % uint32_t(m.spec().vocab));
  for (size_t i = 0; i < T; ++i) tgt[i] = int32_t(rng() % uint32_t(m.spec().vocab));
  m.set_batch(a, in, tgt);
}

// Larger than GPT-2's init so every path (attention included) carries a gradient worth measuring.
Gpt2Params random_params(const Gpt2& m, uint32_t seed, double sd) {
  Gpt2Params p = m.init_params(seed);
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, sd);
  for (auto& g : p)
    for (auto& x : g) x += float(d(rng));
  return p;
}

std::vector<ParamBuf> pviews(const zinf::core::Operator& op, const Gpt2Params& p) {
  std::vector<ParamBuf> v;
  for (int g : op.param_groups) v.push_back({p[size_t(g)].data(), int64_t(p[size_t(g)].size())});
  return v;
}
std::vector<GradBuf> gviews(const zinf::core::Operator& op, Gpt2Params& p) {
  std::vector<GradBuf> v;
  for (int g : op.param_groups) v.push_back({p[size_t(g)].data(), int64_t(p[size_t(g)].size())});
  return v;
}

double max_rel_diff(const Gpt2Params& a, const Gpt2Params& b) {
  double worst = 0, scale = 0;
  for (size_t g = 0; g < a.size(); ++g)
    for (size_t i = 0; i < a[g].size(); ++i) {
      worst = std::max(worst, double(std::abs(a[g][i] - b[g][i])));
      scale = std::max(scale, double(std::abs(b[g][i])));
    }
  return worst / scale;
}

}  // namespace

TEST_CASE("gpt2 starts at a loss of about ln(vocab)", "[gpt2]") {
  Gpt2 m(zinf::models::build_gpt(micro_spec()));
  auto a = m.make_activations();
  set_random_batch(m, a, 1);
  CHECK(m.forward(m.init_params(7), a) == Approx(std::log(13.0)).margin(0.05));
}

TEST_CASE("gpt2 gradients match finite differences along a random direction per group", "[gpt2]") {
  // fp32 model: central differences with eps = 1e-3 along a unit-variance direction; the
  // directional derivative must agree with <grad, direction> to 1% (+ 1e-3 absolute).
  auto spec = micro_spec();
  SECTION("lm_head tied to wte") {}
  SECTION("lm_head untied") { spec.tied_embeddings = false; }
  Gpt2 m(zinf::models::build_gpt(spec), KernelImpl::Reference);
  INFO("tied " << spec.tied_embeddings << ", " << m.graph().params.size() << " groups");
  auto a = m.make_activations();
  set_random_batch(m, a, 2);
  Gpt2Params p = random_params(m, 3, 0.3);
  Gpt2Params g = m.zeros();
  m.forward_backward(p, g, a);
  std::mt19937 rng(4);
  std::normal_distribution<double> nd;
  for (const auto& group : m.graph().params) {
    INFO("group " << group.name);
    auto& v = p[size_t(group.id)];
    std::vector<float> keep = v, dir(v.size());
    double analytic = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      dir[i] = float(nd(rng));
      analytic += double(dir[i]) * double(g[size_t(group.id)][i]);
    }
    const float eps = 1e-3f;
    for (size_t i = 0; i < v.size(); ++i) v[i] = keep[i] + eps * dir[i];
    const double up = m.forward(p, a);
    for (size_t i = 0; i < v.size(); ++i) v[i] = keep[i] - eps * dir[i];
    const double down = m.forward(p, a);
    v = keep;
    const double numeric = (up - down) / (2.0 * double(eps));
    INFO("analytic " << analytic << " numeric " << numeric);
    CHECK(std::abs(analytic - numeric) <= 1e-3 + 1e-2 * std::abs(analytic));
  }
}

TEST_CASE("gpt2 fast kernels match the reference loops", "[gpt2]") {
  auto graph = zinf::models::build_gpt(micro_spec());
  Gpt2 fast(graph, KernelImpl::Fast), ref(graph, KernelImpl::Reference);
  auto a1 = fast.make_activations(), a2 = ref.make_activations();
  set_random_batch(fast, a1, 5);
  set_random_batch(ref, a2, 5);
  Gpt2Params p = random_params(fast, 6, 0.2);
  Gpt2Params g1 = fast.zeros(), g2 = ref.zeros();
  const double l1 = fast.forward_backward(p, g1, a1);
  const double l2 = ref.forward_backward(p, g2, a2);
  CHECK(l1 == Approx(l2).epsilon(1e-5));
  CHECK(max_rel_diff(g1, g2) < 1e-4);
}

TEST_CASE("gpt2 per-operator run with a block dropped and recomputed equals the whole model", "[gpt2]") {
  Gpt2 m(zinf::models::build_gpt(micro_spec()));
  Gpt2Params p = random_params(m, 8, 0.2);
  auto a_ref = m.make_activations();
  set_random_batch(m, a_ref, 9);
  Gpt2Params g_ref = m.zeros();
  const double loss_ref = m.forward_backward(p, g_ref, a_ref);

  auto a = m.make_activations();
  set_random_batch(m, a, 9);
  const auto& ops = m.graph().ops;
  for (const auto& op : ops) m.forward(op.id, pviews(op, p), a);
  CHECK(a.loss == loss_ref);
  const int64_t full = a.bytes();
  for (int l = 0; l < int(m.spec().layers); ++l) a.drop_block(l);  // keep only the checkpoints x[l]
  CHECK(a.bytes() < full / 2);

  a.zero_grads();
  Gpt2Params g = m.zeros();
  int recomputed = -1;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    if (!it->backward) continue;  // the loss: the head's backward computes its gradient
    if (it->block >= 0 && it->block != recomputed) {
      // backward enters block l: rebuild its activations from the checkpoint x[l]
      for (const auto& op : ops)
        if (op.block == it->block) m.recompute(op.id, pviews(op, p), a);
      recomputed = it->block;
    }
    m.backward(it->id, pviews(*it, p), gviews(*it, g), a);
    if (it->block >= 0 && it->name.ends_with("ln_1")) a.drop_block(it->block);
  }
  CHECK(g == g_ref);  // the same kernels on the same values: bit for bit
}

TEST_CASE("gpt2 linear operators run as tiles equal the untiled operator", "[gpt2][tiling]") {
  Gpt2 m(zinf::models::build_gpt(micro_spec()));
  Gpt2Params p = random_params(m, 10, 0.2);
  auto a_ref = m.make_activations();
  set_random_batch(m, a_ref, 11);
  Gpt2Params g_ref = m.zeros();
  const double loss_ref = m.forward_backward(p, g_ref, a_ref);

  auto a = m.make_activations();
  set_random_batch(m, a, 11);
  Gpt2Params g = m.zeros();
  const auto& ops = m.graph().ops;
  auto tiled = [](const zinf::core::Operator& op) { return op.kind == zinf::core::OpKind::Linear; };
  // split each linear into three uneven tiles; each tile is its own buffer (weight rows, then bias rows)
  auto tiles_of = [&](const zinf::core::Operator& op) {
    const auto& grp = m.graph().params[size_t(op.param_groups[0])];
    const int64_t r = grp.rows;
    return std::vector<std::pair<int64_t, int64_t>>{{0, r / 3}, {r / 3, r / 2}, {r / 2, r}};
  };
  auto tile_buf = [&](const std::vector<float>& full, const zinf::core::ParamGroup& grp, int64_t r0, int64_t r1) {
    std::vector<float> t(full.begin() + r0 * grp.cols, full.begin() + r1 * grp.cols);
    t.insert(t.end(), full.begin() + grp.rows * grp.cols + r0, full.begin() + grp.rows * grp.cols + r1);
    return t;
  };
  for (const auto& op : ops) {
    if (!tiled(op)) {
      m.forward(op.id, pviews(op, p), a);
      continue;
    }
    const auto& grp = m.graph().params[size_t(op.param_groups[0])];
    for (auto [r0, r1] : tiles_of(op)) {
      auto t = tile_buf(p[size_t(grp.id)], grp, r0, r1);
      m.forward_tile(op.id, r0, r1, std::vector<ParamBuf>{{t.data(), int64_t(t.size())}}, a);
    }
  }
  CHECK(a.loss == Approx(loss_ref).epsilon(1e-6));
  a.zero_grads();
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    if (!it->backward) continue;
    if (!tiled(*it)) {
      m.backward(it->id, pviews(*it, p), gviews(*it, g), a);
      continue;
    }
    const auto& grp = m.graph().params[size_t(it->param_groups[0])];
    auto& full_grad = g[size_t(grp.id)];
    for (auto [r0, r1] : tiles_of(*it)) {
      auto t = tile_buf(p[size_t(grp.id)], grp, r0, r1);
      std::vector<float> tg(t.size(), 0.0f);
      m.backward_tile(it->id, r0, r1, std::vector<ParamBuf>{{t.data(), int64_t(t.size())}},
                      std::vector<GradBuf>{{tg.data(), int64_t(tg.size())}}, a);
      std::copy(tg.begin(), tg.begin() + (r1 - r0) * grp.cols, full_grad.begin() + r0 * grp.cols);
      std::copy(tg.begin() + (r1 - r0) * grp.cols, tg.end(), full_grad.begin() + grp.rows * grp.cols + r0);
    }
  }
  CHECK(max_rel_diff(g, g_ref) < 1e-5);
}

TEST_CASE("gpt2 vocabulary tiles of the embedding and the head are the untiled arithmetic, but the head's input gradient",
          "[gpt2][tiling][vocabulary]") {
  // With the reference kernels (plain loops), the embedding's output, the logits, the loss and every
  // tile's weight gradient are bitwise the untiled operators'; the head's input gradient sums over
  // the vocabulary, which the tiles add in another order: equal within float rounding. OpenBLAS
  // picks its GEMM kernels by shape, so with the fast kernels a tile's GEMMs may also round
  // differently: within float rounding too.
  for (bool tied : {true, false})
  for (KernelImpl impl : {KernelImpl::Reference, KernelImpl::Fast}) {
    const bool exact = impl == KernelImpl::Reference;
    INFO("tied " << tied << ", " << (exact ? "reference" : "fast") << " kernels");
    zinf::core::ModelSpec s = micro_spec();
    s.vocab = 37;
    s.tied_embeddings = tied;
    Gpt2 m(zinf::models::build_gpt(s), impl);
    const Gpt2Params p = random_params(m, 21, 0.3);
    const auto& ops = m.graph().ops;
    const auto& embed = ops.front();
    const auto& head = ops[ops.size() - 2];
    REQUIRE(head.kind == zinf::core::OpKind::LmHead);
    const int64_t C = s.hidden;
    const std::vector<std::pair<int64_t, int64_t>> tiles{{0, 10}, {10, 11}, {11, 37}};
    auto rows = [&](const std::vector<float>& full, int64_t r0, int64_t r1) {
      return std::vector<float>(full.begin() + r0 * C, full.begin() + r1 * C);
    };
    auto ref = m.make_activations(), a = m.make_activations();
    set_random_batch(m, ref, 5);
    set_random_batch(m, a, 5);
    Gpt2Params g_ref = m.zeros(), g = m.zeros();
    const double loss_ref = m.forward_backward(p, g_ref, ref);
    // Forward: the embedding's tiles in order, the blocks, the head's tiles.
    const int32_t wte = embed.param_groups[0], wpe = embed.param_groups[1], w_head = head.param_groups[0];
    for (const auto& op : ops) {
      if (op.id == embed.id || op.id == head.id) {
        const int32_t grp = op.id == embed.id ? wte : w_head;
        for (auto [r0, r1] : tiles) {
          auto t = rows(p[size_t(grp)], r0, r1);
          std::vector<ParamBuf> bufs{{t.data(), int64_t(t.size())}};
          if (op.id == embed.id) bufs.push_back({p[size_t(wpe)].data(), int64_t(p[size_t(wpe)].size())});
          m.forward_tile(op.id, r0, r1, bufs, a);
        }
        if (op.id == embed.id) CHECK(std::vector<float>(a.x[0].begin(), a.x[0].end()) ==
                                     std::vector<float>(ref.x[0].begin(), ref.x[0].end()));
        continue;
      }
      m.forward(op.id, pviews(op, p), a);
    }
    if (exact) CHECK(a.loss == loss_ref);
    CHECK(a.loss == Approx(loss_ref).epsilon(1e-6));
    // Backward: the head's tiles, last first, each reduced on its own; then the blocks.
    a.zero_grads();
    Gpt2Params g_head = m.zeros();  // the head's contribution to its weight, tile by tile
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      if (!it->backward || it->id == embed.id) continue;
      if (it->id != head.id) {
        m.backward(it->id, pviews(*it, p), gviews(*it, g), a);
        continue;
      }
      for (auto t = tiles.rbegin(); t != tiles.rend(); ++t) {
        auto w = rows(p[size_t(w_head)], t->first, t->second);
        std::vector<float> dw(w.size(), 0.0f);
        m.backward_tile(head.id, t->first, t->second, std::vector<ParamBuf>{{w.data(), int64_t(w.size())}},
                        std::vector<GradBuf>{{dw.data(), int64_t(dw.size())}}, a);
        std::copy(dw.begin(), dw.end(), g_head[size_t(w_head)].begin() + t->first * C);
      }
    }
    // The head's weight gradient alone, untiled, for a bitwise comparison.
    auto h = m.make_activations();
    set_random_batch(m, h, 5);
    m.forward(p, h);
    h.zero_grads();
    Gpt2Params g_head_ref = m.zeros();
    m.backward(head.id, pviews(head, p), gviews(head, g_head_ref), h);
    if (exact) CHECK(g_head[size_t(w_head)] == g_head_ref[size_t(w_head)]);
    CHECK(max_rel_diff(g_head, g_head_ref) < 1e-6);
    // The blocks' gradients come through the head's input gradient: another order of the same sums.
    for (int32_t grp : {wte, wpe, w_head}) g[size_t(grp)] = g_ref[size_t(grp)];
    CHECK(max_rel_diff(g, g_ref) < 1e-5);
    // The embedding's tiles on the untiled run's output gradient: bitwise its rows and wpe's.
    a.dx[0] = ref.dx[0];
    Gpt2Params g_embed = m.zeros(), g_embed_ref = m.zeros();
    m.backward(embed.id, pviews(embed, p), gviews(embed, g_embed_ref), a);
    for (auto t = tiles.rbegin(); t != tiles.rend(); ++t) {
      auto w = rows(p[size_t(wte)], t->first, t->second);
      std::vector<float> dw(w.size(), 0.0f);
      m.backward_tile(embed.id, t->first, t->second,
                      std::vector<ParamBuf>{{w.data(), int64_t(w.size())}, {p[size_t(wpe)].data(), int64_t(p[size_t(wpe)].size())}},
                      std::vector<GradBuf>{{dw.data(), int64_t(dw.size())},
                                           {g_embed[size_t(wpe)].data(), int64_t(g_embed[size_t(wpe)].size())}},
                      a);
      std::copy(dw.begin(), dw.end(), g_embed[size_t(wte)].begin() + t->first * C);
    }
    CHECK(g_embed[size_t(wte)] == g_embed_ref[size_t(wte)]);
    CHECK(g_embed[size_t(wpe)] == g_embed_ref[size_t(wpe)]);
  }
}

TEST_CASE("gpt2 rejects wrong buffers and missing inputs with the operator's name", "[gpt2]") {
  Gpt2 m(zinf::models::build_gpt(micro_spec()));
  auto a = m.make_activations();
  set_random_batch(m, a, 12);
  Gpt2Params p = m.init_params(1);
  const auto& op = m.graph().ops[2];  // h.0.attn.c_attn
  REQUIRE(op.name == "h.0.attn.c_attn");
  CHECK_THROWS_WITH(m.forward(op.id, pviews(op, p), a), Catch::Contains("h.0.attn.c_attn") &&
                                                            Catch::Contains("not resident"));
  std::vector<ParamBuf> wrong = {{p[0].data(), 3}};
  CHECK_THROWS_WITH(m.forward(op.id, wrong, a), Catch::Contains("h.0.attn.c_attn"));
  CHECK_THROWS_WITH(m.forward_tile(op.id, 0, 1000, std::vector<ParamBuf>{{p[0].data(), 5}}, a), Catch::Contains("bad tile"));
  // after a drop, backward of an operator inside the block needs a recompute first
  Gpt2Params g = m.zeros();
  m.forward(p, a);
  a.drop_block(1);
  const auto& fc = m.graph().ops[19];
  REQUIRE(fc.name == "h.1.mlp.c_proj");
  CHECK_THROWS_WITH(m.backward(fc.id, pviews(fc, p), gviews(fc, g), a),
                    Catch::Contains("h.1.mlp.c_proj") && Catch::Contains("not resident"));
  Gpt2Activations foreign;  // not from make_activations()
  CHECK_THROWS_WITH(m.forward(0, pviews(m.graph().ops[0], p), foreign), Catch::Contains("make_activations"));
  std::vector<int32_t> bad(size_t(m.graph().tokens), 13);
  CHECK_THROWS_WITH(m.set_batch(a, bad, bad), Catch::Contains("outside the vocabulary"));
}

TEST_CASE("core counts the activations these kernels keep: a whole forward holds exactly its fp32 elements",
          "[gpt2][memory]") {
  Gpt2 m(zinf::models::build_gpt(micro_spec()));
  auto a = m.make_activations();
  set_random_batch(m, a, 3);
  m.forward(m.init_params(7), a);
  std::vector<int32_t> ops;
  for (const auto& o : m.graph().ops) ops.push_back(o.id);
  const auto counted = zinf::core::run_activation_elements(m.graph(), ops, false);
  CHECK(double(a.bytes()) == 4.0 * counted.forward);
  // Backward: every block's gradients (core counts one block's at a time, with its input gradient
  // and the incoming one; the whole-model backward keeps them all, each dx once), plus the head's
  // and the embedding's.
  const double forward_bytes = double(a.bytes());
  Gpt2Params grads = m.zeros();
  m.forward_backward(m.init_params(7), grads, a);
  std::vector<int32_t> outside;
  for (const auto& o : m.graph().ops)
    if (o.block < 0) outside.push_back(o.id);
  const double T = double(m.graph().tokens), TC = T * double(m.spec().hidden), L = double(m.spec().layers);
  const double per_block = T * zinf::core::block_backward_elements(m.spec()) - 2 * TC;  // without its dx pair
  const double kept = L * per_block + (L - 1) * TC + zinf::core::run_activation_elements(m.graph(), outside, false).backward;
  CHECK(double(a.bytes()) - forward_bytes == 4.0 * kept);
}

TEST_CASE("the graph gives every operator its role, and the model runs from roles, not names", "[gpt2]") {
  using zinf::core::OpRole;
  auto graph = zinf::models::build_gpt(micro_spec());
  std::vector<OpRole> block_roles;
  for (const auto& op : graph.ops) {
    REQUIRE(op.role != OpRole::None);
    if (op.block == 0) block_roles.push_back(op.role);
  }
  CHECK(block_roles == std::vector<OpRole>{OpRole::Ln1, OpRole::CAttn, OpRole::Attn, OpRole::AttnProj, OpRole::Res1,
                                           OpRole::Ln2, OpRole::Fc, OpRole::Gelu, OpRole::MlpProj, OpRole::Res2});
  CHECK(graph.ops.front().role == OpRole::Embed);
  CHECK(graph.ops.back().role == OpRole::Loss);
  // Renamed operators run as before; an operator without a role is refused, naming it.
  auto renamed = graph;
  for (auto& op : renamed.ops) op.name = "op" + std::to_string(op.id);
  Gpt2 a(graph), b(renamed);
  Gpt2Activations xa = a.make_activations(), xb = b.make_activations();
  set_random_batch(a, xa, 3);
  set_random_batch(b, xb, 3);
  const Gpt2Params p = a.init_params(5);
  CHECK(a.forward(p, xa) == b.forward(p, xb));
  auto roleless = graph;
  roleless.ops[3].role = OpRole::None;
  CHECK_THROWS_WITH(Gpt2(roleless), Catch::Matchers::Contains(roleless.ops[3].name));
}
