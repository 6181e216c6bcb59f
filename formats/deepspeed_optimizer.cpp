// The optimizer section as DeepSpeed 0.16.5 builds it (runtime/config.py get_optimizer_name,
// engine.py _configure_basic_optimizer, _do_sanity_check, _do_optimizer_sanity_check): names
// compared lower-case against DeepSpeed's own optimizers, else looked up in torch.optim as given;
// "Adam" runs AdamW's decoupled weight decay unless adam_w_mode is false; the params become the
// keyword arguments of FusedAdam, DeepSpeedCPUAdam or torch's Adam, so an unknown one is refused.
#include <fmt/format.h>

#include <map>
#include <set>

#include "formats/deepspeed_reader.hpp"

namespace zinf::core::deepspeed {

namespace {

// What zinf plans for each optimizer: its name in RunConfig, the fp32 tensors it keeps per
// parameter besides the master weights, whether its weight decay is decoupled from the gradient,
// and whether ZeRO runs it without zero_allow_untested_optimizer (ZERO_SUPPORTED_OPTIMIZERS).
struct OptimizerKind {
  std::string zinf_type;
  int states = 2;
  bool decoupled = false;
  bool zero_supported = false;
};

const std::map<std::string, OptimizerKind>& deepspeed_optimizers() {
  static const std::map<std::string, OptimizerKind> m = {
      {"adam", {"adamw", 2, true, true}},  // adam_w_mode decides; see below
      {"adamw", {"adamw", 2, true, true}},
      {"lamb", {"lamb", 2, true, false}},
      {"onebitadam", {"adam", 2, false, false}},
      {"zerooneadam", {"adam", 2, false, false}},
      {"onebitlamb", {"lamb", 2, true, false}},
      {"adagrad", {"adagrad", 1, false, true}},
      {"lion", {"lion", 1, true, true}},
      {"muadam", {"adam", 2, false, false}},
      {"muadamw", {"adamw", 2, true, false}},
      {"musgd", {"sgd", 0, false, false}},
  };
  return m;
}

// torch.optim classes, as DeepSpeed finds them with getattr(torch.optim, name).
const std::map<std::string, OptimizerKind>& torch_optimizers() {
  static const std::map<std::string, OptimizerKind> m = {
      {"SGD", {"sgd", 0, false, false}},      {"RMSprop", {"rmsprop", 1, false, false}},
      {"Adamax", {"adamax", 2, false, false}}, {"NAdam", {"nadam", 2, false, false}},
      {"RAdam", {"radam", 2, false, false}},   {"Adadelta", {"adadelta", 2, false, false}},
      {"ASGD", {"asgd", 1, false, false}},     {"Rprop", {"rprop", 2, false, false}},
      {"SparseAdam", {"sparseadam", 2, false, false}}, {"Adafactor", {"adafactor", 0, true, false}},
  };
  return m;
}

}  // namespace

void Reader::check_adam_params(const json* params, const std::string& ds_name, int& states,
                               std::string& implementation, bool& decoupled_out) {
  const bool cpu_optimizer = c_.optimizer.tier != Tier::Device;
  auto param = [&](const char* key) { return params ? member(params, key) : nullptr; };
  {
    const json* torch_adam = param("torch_adam");
    const json* w_mode = param("adam_w_mode");
    const bool decoupled = ds_name == "adamw" || !w_mode || truthy(*w_mode);
    decoupled_out = decoupled;
    std::set<std::string> allowed;
    if (torch_adam && truthy(*torch_adam)) {
      implementation = decoupled ? "torch.optim.AdamW" : "torch.optim.Adam";
      allowed = {"lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable", "differentiable",
                 "fused"};
    } else if (cpu_optimizer) {
      implementation = "DeepSpeedCPUAdam";
      allowed = {"lr", "bias_correction", "betas", "eps", "weight_decay", "amsgrad", "fp32_optimizer_states"};
    } else {
      implementation = "FusedAdam";
      allowed = {"lr", "bias_correction", "betas", "eps", "weight_decay", "amsgrad", "set_grad_none"};
    }
    if (params)
      for (auto it = params->begin(); it != params->end(); ++it) {
        if (it.key() == "torch_adam" || it.key() == "adam_w_mode") continue;
        if (!allowed.count(it.key()))
          refuse("optimizer.params." + it.key(),
                 fmt::format("{}.__init__() got an unexpected keyword argument '{}'", implementation, it.key()));
      }
    if (const json* ams = param("amsgrad"); ams && truthy(*ams)) {
      if (implementation == "FusedAdam") refuse("optimizer.params.amsgrad", "FusedAdam does not support the AMSGrad variant.");
      states = 3;  // torch keeps max_exp_avg_sq
    }
    if (w_mode)
      note("optimizer.params.adam_w_mode", KeyFate::Mapped, shown(*w_mode),
           ds_name == "adamw" ? "AdamW is decoupled whatever adam_w_mode says" : "");
  }
}

void Reader::read_optimizer_numbers(const json* params, const std::string& ds_name) {
  auto param = [&](const char* key) { return params ? member(params, key) : nullptr; };
  // The numbers: DeepSpeed's (FusedAdam's) defaults where absent; zinf's train reads them.
  if (ds_name == "adam" || ds_name == "adamw") {
    c_.lr = 1e-3;
    c_.beta1 = 0.9;
    c_.beta2 = 0.999;
    c_.eps = 1e-8;
    c_.weight_decay = 0;
  }
  auto number = [&](const char* key, double& into, double lowest) {
    const json* v = param(key);
    if (!v) return;
    if (!v->is_number()) refuse(std::string("optimizer.params.") + key, fmt::format("'{}' is not a number", shown(*v)));
    if (v->get<double>() < lowest)
      refuse(std::string("optimizer.params.") + key, fmt::format("Invalid {} value: {}", key, v->get<double>()));
    into = v->get<double>();
  };
  number("lr", c_.lr, 0);
  number("eps", c_.eps, 0);
  number("weight_decay", c_.weight_decay, 0);
  if (const json* b = param("betas")) {
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number())
      refuse("optimizer.params.betas", fmt::format("'{}' is not a list of two numbers", shown(*b)));
    for (size_t i = 0; i < 2; ++i)
      if (!((*b)[i].get<double>() >= 0 && (*b)[i].get<double>() < 1))
        refuse("optimizer.params.betas", fmt::format("Invalid beta parameter at index {}: {} (each beta is at least 0 "
                                                     "and below 1)",
                                                     i, (*b)[i].get<double>()));
    c_.beta1 = (*b)[0].get<double>();
    c_.beta2 = (*b)[1].get<double>();
  }
}

void Reader::read_optimizer() {
  const json* o = member(&root_, "optimizer");
  if (o && !o->is_null() && !o->is_object()) refuse("optimizer", "must be a mapping of keys");
  const json* type = o ? member(o, "type") : nullptr;
  if (!type || type->is_null()) {
    // No type: the model code brings the optimizer (the HF Trainer's default is AdamW).
    c_.optimizer_type = "adamw";
    c_.optimizer_states = 2;
    note("optimizer.type", KeyFate::Defaulted, "AdamW",
         "no optimizer type: the model code brings its optimizer (the HF Trainer's default: AdamW); zinf plans AdamW "
         "with decoupled weight decay");
    return;
  }
  if (!type->is_string()) refuse("optimizer.type", fmt::format("'{}' is not an optimizer name", shown(*type)));
  const std::string name = type->get<std::string>();
  std::string lower = name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  OptimizerKind kind;
  std::string ds_name;
  if (auto it = deepspeed_optimizers().find(lower); it != deepspeed_optimizers().end()) {
    kind = it->second;
    ds_name = lower;
  } else if (auto t = torch_optimizers().find(name); t != torch_optimizers().end()) {
    kind = t->second;
    ds_name = name;
  } else if (name == "LBFGS") {
    unsupported("optimizer.type", "LBFGS keeps a history of vectors per parameter and needs a closure each step; zinf "
                                  "plans first-order optimizers only");
  } else {
    refuse("optimizer.type", fmt::format("{} is not a supported DeepSpeed Optimizer", name));
  }

  const json* params = member(o, "params");
  if (params && !params->is_null() && !params->is_object()) refuse("optimizer.params", "must be a mapping of keys");
  if (params && member(params, "max_grad_norm"))
    refuse("optimizer.params.max_grad_norm",
           "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed parameter "
           "'gradient_clipping'");
  auto param = [&](const char* key) { return params ? member(params, key) : nullptr; };

  std::string implementation;
  if (ds_name == "adam" || ds_name == "adamw") {
    check_adam_params(params, ds_name, kind.states, implementation, kind.decoupled);
    kind.zinf_type = kind.decoupled ? "adamw" : "adam";
  }
  if (stage_ > 0) {
    if (ds_name == "onebitadam" || ds_name == "zerooneadam" || ds_name == "onebitlamb")
      refuse("optimizer.type", fmt::format("{} is not compatible with ZeRO", ds_name == "onebitadam"    ? "1bit-Adam"
                                                                              : ds_name == "zerooneadam" ? "0/1 Adam"
                                                                                                         : "1bit-Lamb"));
    const json* allow = member(&root_, "zero_allow_untested_optimizer");
    if (!kind.zero_supported && !(allow && truthy(*allow)))
      refuse("optimizer.type", "You are using an untested ZeRO Optimizer. Please add <\"zero_allow_untested_optimizer\": "
                               "true> in the configuration file to use it.");
  }
  if (ds_name == "lamb" || ds_name == "onebitlamb") {
    // DeepSpeed's loss scale is dynamic only in fp16 with loss_scale 0 (and in fp32); bf16 fixes it at 1.
    const json* ls = at("fp16.loss_scale");
    const bool dynamic = c_.precision == Precision::Fp32 ||
                         (c_.precision == Precision::Fp16 && (!ls || (ls->is_number() && ls->get<double>() == 0)));
    if (!dynamic) refuse("optimizer.type", fmt::format("DeepSpeed {} optimizer requires dynamic loss scaling", ds_name));
  }
  if (ds_name == "onebitadam" || ds_name == "zerooneadam" || ds_name == "onebitlamb")
    note("optimizer.params", KeyFate::Ignored, params ? shown(*params) : "{}",
         "DeepSpeed compresses this optimizer's communication to 1 bit; zinf reduces full gradients");
  if (ds_name == "sgd" || ds_name == "SGD" || ds_name == "musgd")
    if (const json* m = param("momentum"); m && m->is_number() && m->get<double>() > 0) kind.states = 1;
  if (ds_name == "RMSprop") {
    if (const json* m = param("momentum"); m && m->is_number() && m->get<double>() > 0) ++kind.states;
    if (const json* cen = param("centered"); cen && truthy(*cen)) ++kind.states;
  }
  c_.optimizer_type = kind.zinf_type;
  c_.optimizer_states = kind.states;
  note("optimizer.type", KeyFate::Mapped, name,
       fmt::format("{}{}, {} state tensor{} per parameter, weight decay {}", kind.zinf_type,
                   implementation.empty() ? "" : " (" + implementation + ")", kind.states, kind.states == 1 ? "" : "s",
                   kind.decoupled ? "decoupled" : "added to the gradient (L2)"));

  read_optimizer_numbers(params, ds_name);
  if (params)
    note("optimizer.params", KeyFate::Mapped, shown(*params), "lr, betas, eps and weight decay for zinf train");
}

}  // namespace zinf::core::deepspeed
