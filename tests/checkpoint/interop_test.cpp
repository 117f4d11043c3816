// Python interop, both directions, with the project's Python (the venv's torch):
//   * files we write load in torch.load(weights_only=True) with the expected keys, shapes, values
//     and shared storages (float-holding files: weights_only on torch >= 2, and an allowlist-only
//     unpickler on 1.13, whose weights_only reader lacks BINFLOAT);
//   * our bytes equal torch.save's for the same value;
//   * files torch.save writes (dicts, OrderedDict state dicts, views, every dtype, Parameters,
//     protocols 2/4/5, a DeepSpeed-like file with Python objects) read back with our reader;
//   * DeepSpeed's loss scalers: our pickle of them is pickle's of DeepSpeed's classes.
// Skipped with a reason (failed under CI) when that Python cannot import torch.
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/ds_objects.h"
#include "checkpoint/pt/pickler.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/pt/zip_reader.h"
#include "core/error.h"
#include "tests/checkpoint/test_util.h"
#include "zrt/build_config.h"

namespace zrt::ckpt {
namespace {

using test::run_python;
using test::TempDir;

Value no_floats_value() {
  Value v = Value::ordered_dict();
  v.set("w", torch::arange(12, torch::kFloat).reshape({3, 4}));
  v.set("b", torch::arange(6).to(torch::kBFloat16));
  v.set("h", (torch::arange(6) - 3).to(torch::kHalf));
  v.set("i", torch::tensor({-(int64_t{1} << 40), int64_t{0}, int64_t{1} << 40}));
  v.set("flag", torch::tensor({true, false, true}));
  at::Tensor flat = torch::arange(100, torch::kFloat);
  v.set("flat", flat);
  v.set("parts",
        Value::list({flat.narrow(0, 0, 40), flat.narrow(0, 40, 35), flat.narrow(0, 75, 25)}));
  v.set("shape", Value::torch_size({3, 4}));
  v.set("n", 7);
  v.set("big", int64_t{1} << 40);
  v.set("neg", -5);
  v.set("s", "hello");
  v.set("none", Value());
  v.set("t", Value::tuple({1, "a", true}));
  Value d = Value::dict();
  d.set(0, "zero");
  d.set("k", Value::list({1, 2}));
  v.set("d", d);
  return v;
}

Value with_floats_value() {
  Value v = Value::dict();
  v.set("lr", 0.001);
  v.set("betas", Value::tuple({0.9, 0.999}));
  Value state = Value::dict();
  state.set(0, Value::dict());
  state.at(0).set("exp_avg", torch::ones({5}));
  state.at(0).set("step", 3);
  v.set("state", state);
  return v;
}

constexpr const char* kCheckCppFiles = R"PY(
import sys, types, pickle, collections, torch
d = sys.argv[1]
major = int(torch.__version__.split('.')[0])
a = torch.load(d + '/no_floats.pt', weights_only=True)
assert type(a) is collections.OrderedDict, type(a)
assert list(a.keys()) == ['w', 'b', 'h', 'i', 'flag', 'flat', 'parts', 'shape', 'n', 'big', 'neg',
                          's', 'none', 't', 'd'], list(a.keys())
assert a['w'].dtype == torch.float32 and a['w'].shape == (3, 4)
assert torch.equal(a['w'], torch.arange(12.).reshape(3, 4))
assert a['b'].dtype == torch.bfloat16 and torch.equal(a['b'], torch.arange(6).to(torch.bfloat16))
assert a['h'].dtype == torch.float16 and torch.equal(a['h'], (torch.arange(6) - 3).half())
assert a['i'].dtype == torch.int64 and a['i'].tolist() == [-(2**40), 0, 2**40]
assert a['flag'].dtype == torch.bool and a['flag'].tolist() == [True, False, True]
flat = a['flat']
assert torch.equal(flat, torch.arange(100.))
parts = a['parts']
assert type(parts) is list and [p.numel() for p in parts] == [40, 35, 25]
for p in parts:
    assert p.storage().data_ptr() == flat.storage().data_ptr(), 'views must share the storage'
assert parts[1].storage_offset() == 40 and torch.equal(parts[1], torch.arange(40., 75.))
assert type(a['shape']) is torch.Size and a['shape'] == torch.Size([3, 4])
assert a['n'] == 7 and a['big'] == 2**40 and a['neg'] == -5 and a['s'] == 'hello'
assert a['none'] is None
assert a['t'] == (1, 'a', True) and type(a['t']) is tuple
assert a['d'] == {0: 'zero', 'k': [1, 2]} and type(a['d']) is dict

ALLOWED = {('collections', 'OrderedDict'), ('torch._utils', '_rebuild_tensor_v2'), ('torch', 'Size')}
class Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in ALLOWED and not (module == 'torch' and name.endswith('Storage')):
            raise pickle.UnpicklingError('%s.%s is not on the allowlist' % (module, name))
        return super().find_class(module, name)
restricted = types.ModuleType('restricted_pickle')
restricted.Unpickler = Restricted
restricted.load = pickle.load
torch.load(d + '/no_floats.pt', pickle_module=restricted)
if major >= 2:
    b = torch.load(d + '/with_floats.pt', weights_only=True)
else:
    b = torch.load(d + '/with_floats.pt', pickle_module=restricted)
assert type(b['lr']) is float and b['lr'] == 0.001
assert b['betas'] == (0.9, 0.999)
assert type(b['state'][0]['step']) is int and b['state'][0]['step'] == 3
assert torch.equal(b['state'][0]['exp_avg'], torch.ones(5))
# Python's own zip reader checks every record's CRC against the central directory.
import zipfile
for name in ('no_floats.pt', 'with_floats.pt'):
    assert zipfile.ZipFile(d + '/' + name).testzip() is None, name
print('OK')
)PY";

TEST(Interop, PythonLoadsWhatWeWrite) {
  ZRT_REQUIRE_PYTHON_TORCH();
  TempDir dir;
  save_pt(no_floats_value(), dir / "no_floats.pt");
  save_pt(with_floats_value(), dir / "with_floats.pt");
  const auto r = run_python(kCheckCppFiles, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

constexpr const char* kReferenceSave = R"PY(
import sys, io, collections, torch
x = torch.arange(10, dtype=torch.float32)
v = collections.OrderedDict()
v['a'] = x[2:5]
v['b'] = x
v['c'] = torch.Size([2, 3])
v['d'] = [1, 2.5, 'str', None, True]
v['e'] = (1,)
v['f'] = {1: 2}
v['g'] = (1, 2, 3, 4)
v['h'] = []
v['i'] = -70000
v['j'] = 2**40
v['k'] = collections.OrderedDict()
v['l'] = torch.zeros(0)
v['m'] = torch.arange(6, dtype=torch.int16).reshape(2, 3).t()
buf = io.BytesIO()
torch.save(v, buf)
open(sys.argv[1], 'wb').write(buf.getvalue())
print('torch', torch.__version__)
)PY";

TEST(Interop, OurBytesEqualTorchSave) {
  ZRT_REQUIRE_PYTHON_TORCH();
  TempDir dir;
  const auto r = run_python(kReferenceSave, dir / "ref.pt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  at::Tensor x = torch::arange(10, torch::kFloat);
  Value v = Value::ordered_dict();
  v.set("a", x.slice(0, 2, 5));
  v.set("b", x);
  v.set("c", Value::torch_size({2, 3}));
  v.set("d", Value::list({1, 2.5, "str", Value(), true}));
  v.set("e", Value::tuple({1}));
  Value f = Value::dict();
  f.set(1, 2);
  v.set("f", f);
  v.set("g", Value::tuple({1, 2, 3, 4}));
  v.set("h", Value::list());
  v.set("i", -70000);
  v.set("j", int64_t{1} << 40);
  v.set("k", Value::ordered_dict());
  v.set("l", torch::zeros({0}));
  v.set("m", torch::arange(6, torch::kShort).reshape({2, 3}).t());
  const std::string ours = pt_bytes(v);
  const std::string ref = test::read_all(dir / "ref.pt");
  // The pickles first (the clearest diff), then the whole archive.
  MemorySource ours_src(ours, "ours"), ref_src(ref, "ref");
  ZipReader ours_zip(ours_src, 100), ref_zip(ref_src, 100);
  const std::string ours_pkl =
      ours_zip.read_string(*ours_zip.find("archive/data.pkl"), 1 << 20, true);
  const std::string ref_pkl = ref_zip.read_string(*ref_zip.find("archive/data.pkl"), 1 << 20, true);
  EXPECT_EQ(ours_pkl, ref_pkl);
  // Record by record: every record of ours is in torch.save's archive with the same bytes, and
  // the records only torch.save writes are its metadata (torch >= 2.1: byteorder, alignment,
  // format version, and a random serialization id that makes whole-file equality impossible).
  const std::set<std::string> metadata_only = {"archive/byteorder", "archive/.format_version",
                                               "archive/.storage_alignment",
                                               "archive/.data/serialization_id"};
  std::set<std::string> ours_names;
  for (const auto& e : ours_zip.entries()) {
    ours_names.insert(e.name);
    const auto* theirs = ref_zip.find(e.name);
    ASSERT_NE(theirs, nullptr) << "torch.save has no record " << e.name;
    if (e.name == "archive/.data/serialization_id") continue;  // random in both (LibTorch 2.x)
    EXPECT_EQ(ours_zip.read_string(e, 1 << 20, true), ref_zip.read_string(*theirs, 1 << 20, true))
        << "record " << e.name;
  }
  for (const auto& e : ref_zip.entries()) {
    if (ours_names.count(e.name) == 0) {
      EXPECT_EQ(metadata_only.count(e.name), 1u) << "we do not write torch.save's record " << e.name;
    }
  }
}

// DeepSpeed's loss scalers, by DeepSpeed's own classes: ZeroRT's pickle of a LossScaler and a
// DynamicLossScaler is byte for byte what pickle makes of DeepSpeed's objects with the same
// attributes; Python unpickles ours into working DeepSpeed objects (update_scale runs), and with
// torch >= 2.4 also under weights_only=True once the two classes are safe globals; our strict
// reader takes DeepSpeed's torch.save of them.
constexpr const char* kDsLossScalers = R"PY(
import sys, io, pickle, pickletools, torch
from deepspeed.runtime.fp16.loss_scaler import LossScaler, DynamicLossScaler
from deepspeed.utils.tensor_fragment import fragment_address
d = sys.argv[1]
static = LossScaler(scale=1.0)
dyn = DynamicLossScaler(init_scale=65536.0, scale_window=3, min_scale=1.0, delayed_shift=2,
                        consecutive_hysteresis=False, raise_error_at_min_scale=True,
                        dtype=torch.float16)
dyn.cur_iter, dyn.last_overflow_iter, dyn.cur_hysteresis = 7, 3, 1
frag = fragment_address(numel=5, start=2)
ref = pickle.dumps({'static': static, 'dynamic': dyn, 'fragment': frag}, protocol=2)
ours = open(d + '/scalers.pkl', 'rb').read()
if ours != ref:
    out = io.StringIO()
    pickletools.dis(ours, out=out)
    print('ours:\n' + out.getvalue())
    out = io.StringIO()
    pickletools.dis(ref, out=out)
    print('pickle of DeepSpeed objects:\n' + out.getvalue())
    sys.exit('RESULT bytes differ')
got = pickle.loads(ours)
assert type(got['static']) is LossScaler and got['static'].cur_scale == 1.0, vars(got['static'])
g = got['dynamic']
assert type(g) is DynamicLossScaler and vars(g) == vars(dyn), (vars(g), vars(dyn))
g.update_scale(False)  # the third stable step since the overflow at 3: DeepSpeed doubles
assert g.cur_scale == 131072.0 and g.cur_hysteresis == 2 and g.cur_iter == 8, vars(g)
assert got['fragment'] == frag and got['fragment'].start == 2, got['fragment']
major, minor = (int(x) for x in torch.__version__.split('.')[:2])
if (major, minor) >= (2, 4):
    with torch.serialization.safe_globals([LossScaler, DynamicLossScaler, fragment_address]):
        w = torch.load(d + '/scalers.pt', weights_only=True)
    assert vars(w['dynamic']) == vars(dyn) and vars(w['static']) == vars(static)
torch.save({'static': static, 'dynamic': dyn}, d + '/deepspeed.pt')
print('RESULT OK')
)PY";

// The fragment addresses of param_slice_mappings (DeepSpeed's dataclass) ride along.
TEST(Interop, LossScalersPickleAsDeepSpeedDoes) {
  ZRT_REQUIRE_PYTHON("torch, deepspeed");
  TempDir dir;
  const Json dynamic = {{"cur_scale", 65536.0},       {"dynamic", true},
                        {"cur_iter", 7},              {"last_overflow_iter", 3},
                        {"scale_factor", 2.0},        {"scale_window", 3},
                        {"min_scale", 1.0},           {"delayed_shift", 2},
                        {"cur_hysteresis", 1},        {"consecutive_hysteresis", false},
                        {"raise_error_at_min_scale", true}};
  const Json stat = {{"cur_scale", 1.0}, {"dynamic", false}};
  Value v = Value::dict();
  v.set("static", ds_loss_scaler_value(stat));
  v.set("dynamic", ds_loss_scaler_value(dynamic));
  v.set("fragment", ds_fragment_address_value(5, 2));
  std::ofstream(dir / "scalers.pkl", std::ios::binary) << pickle_value(v).bytes;
  save_pt(v, dir / "scalers.pt");
  const auto r = run_python(kDsLossScalers, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("RESULT OK"), std::string::npos) << r.output;
  // Back: the strict reader, DeepSpeed's file, the same states.
  const Value ds = load_pt(dir / "deepspeed.pt");
  EXPECT_EQ(ds_loss_scaler_state(ds.at("dynamic"), "deepspeed.pt"), dynamic);
  EXPECT_EQ(ds_loss_scaler_state(ds.at("static"), "deepspeed.pt"), stat);
  EXPECT_EQ(ds_loss_scaler_state(load_pt(dir / "scalers.pt").at("dynamic"), "scalers.pt"), dynamic);
  EXPECT_EQ(ds_fragment_address(load_pt(dir / "scalers.pt").at("fragment"), "scalers.pt"),
            (std::pair<int64_t, int64_t>{5, 2}));
  // Older ZeroRT files hold the state as a dict; anything else is refused by name.
  EXPECT_EQ(ds_loss_scaler_state(from_json(dynamic), "old"), dynamic);
  try {
    ds_loss_scaler_state(Value::object("apex.amp.LossScaler", Value::tuple(), Value::dict(), {}, {}),
                         "somewhere/global_step3");
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("somewhere/global_step3: the loss scaler is a "
                                         "apex.amp.LossScaler"),
              std::string::npos)
        << e.what();
  }
}

constexpr const char* kWriteFixtures = R"PY(
import sys, types, argparse, enum, collections, torch
d = sys.argv[1]
torch.manual_seed(0)
torch.save({'a': torch.arange(6.).reshape(2, 3), 'n': 3, 'f': 2.5, 's': 'x', 'l': [1, None, True],
            't': (1, 2), 'neg': -2**40, 'u': 'h\u00e9'}, d + '/dict.pt')
model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
with torch.no_grad():
    for i, p in enumerate(model.parameters()):
        p.copy_(torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) + i)
torch.save(model.state_dict(), d + '/state_dict.pt')
x = torch.arange(10.)
torch.save({'a': x[2:5], 'b': x, 'c': x.view(2, 5).t(), 'e': x[10:]}, d + '/views.pt')
dt = {}
for name, t in [('bf16', torch.bfloat16), ('f16', torch.float16), ('f64', torch.float64),
                ('i8', torch.int8), ('u8', torch.uint8), ('i16', torch.int16), ('i32', torch.int32),
                ('i64', torch.int64)]:
    dt[name] = (torch.arange(12) - 6).reshape(3, 4).to(t)
dt['bool'] = torch.tensor([True, False])
torch.save(dt, d + '/dtypes.pt')
torch.save({'p': torch.nn.Parameter(torch.ones(3))}, d + '/param.pt')
attr = torch.arange(4.)
attr.ds_id = 3  # a Python attribute: torch.save writes _rebuild_from_type_v2 (DeepSpeed ZeRO-3)
torch.save({'t': attr}, d + '/attr.pt')
class Sub(torch.Tensor):
    pass
torch.save({'t': torch.arange(4.).as_subclass(Sub)}, d + '/subclass.pt')
for proto in (4, 5):
    torch.save(collections.OrderedDict(w=torch.ones(2, 2), name='p%d' % proto, f=0.5),
               d + '/proto%d.pt' % proto, pickle_protocol=proto)
torch.save({'w': torch.ones(2)}, d + '/legacy.pt', _use_new_zipfile_serialization=False)

# A DeepSpeed-like model-states file: Python objects next to the state dict.
def fake_module(name):
    parts = name.split('.')
    for i in range(1, len(parts) + 1):
        n = '.'.join(parts[:i])
        if n not in sys.modules:
            sys.modules[n] = types.ModuleType(n)
    return sys.modules[name]
ls = fake_module('deepspeed.runtime.fp16.loss_scaler')
class LossScaler:
    def __init__(self):
        self.cur_scale = 65536.0
        self.cur_iter = 12
LossScaler.__module__ = ls.__name__
LossScaler.__qualname__ = 'LossScaler'
ls.LossScaler = LossScaler
zc = fake_module('deepspeed.runtime.zero.config')
class ZeroStageEnum(enum.IntEnum):
    disabled = 0
    optimizer_states = 1
    gradients = 2
ZeroStageEnum.__module__ = zc.__name__
ZeroStageEnum.__qualname__ = 'ZeroStageEnum'
zc.ZeroStageEnum = ZeroStageEnum
ds = collections.OrderedDict()
ds['module'] = model.state_dict()
ds['buffer_names'] = ['1.running_mean', '1.running_var', '1.num_batches_tracked']
ds['loss_scaler'] = LossScaler()
ds['zero_stage'] = ZeroStageEnum.gradients
ds['optimizer'] = None
ds['param_shapes'] = [collections.OrderedDict([('0.weight', torch.Size([2, 3])),
                                               ('0.bias', torch.Size([2]))])]
ds['sparse_tensor_module_names'] = set(['emb'])
ds['args'] = argparse.Namespace(lr=0.001)
ds['global_steps'] = 10
ds['ds_config'] = {'train_batch_size': 8, 'fp16': {'enabled': True}}
ds['ds_version'] = '0.19.6'
torch.save(ds, d + '/mp_rank_00_model_states.pt')
print('OK')
)PY";

class PythonFixtures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!zrt::test::python_can_import("torch")) return;
    dir_ = new TempDir();
    const auto r = run_python(kWriteFixtures, dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ZRT_REQUIRE_PYTHON_TORCH(); }
  static std::string path(const std::string& name) { return *dir_ / name; }
  static TempDir* dir_;
};
TempDir* PythonFixtures::dir_ = nullptr;

TEST_F(PythonFixtures, PlainDict) {
  Value v = load_pt(path("dict.pt"));
  ASSERT_TRUE(v.is_dict());
  EXPECT_FALSE(v.is_ordered_dict());
  EXPECT_TRUE(v.at("a").as_tensor().equal(torch::arange(6, torch::kFloat).reshape({2, 3})));
  EXPECT_EQ(v.at("n").as_int(), 3);
  EXPECT_EQ(v.at("f").as_double(), 2.5);
  EXPECT_TRUE(v.at("f").is_double());
  EXPECT_EQ(v.at("s").as_string(), "x");
  EXPECT_TRUE(v.at("l").equals(Value::list({1, Value(), true})));
  EXPECT_TRUE(v.at("t").equals(Value::tuple({1, 2})));
  EXPECT_EQ(v.at("neg").as_int(), -(int64_t{1} << 40));
  EXPECT_EQ(v.at("u").as_string(), "h\xc3\xa9");
}

TEST_F(PythonFixtures, StateDictWithMetadata) {
  Value v = load_pt(path("state_dict.pt"));
  ASSERT_TRUE(v.is_ordered_dict());
  std::vector<std::string> keys;
  for (const auto& [k, _] : v.as_dict()) keys.push_back(k.as_str());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                      "1.running_var", "1.num_batches_tracked"}));
  EXPECT_TRUE(v.at("0.weight").as_tensor().equal(torch::arange(6, torch::kFloat).reshape({2, 3})));
  EXPECT_TRUE(v.at("1.bias").as_tensor().equal(torch::arange(2, torch::kFloat) + 3));
  const at::Tensor& nbt = v.at("1.num_batches_tracked").as_tensor();
  EXPECT_EQ(nbt.dim(), 0);
  EXPECT_EQ(nbt.scalar_type(), at::kLong);
}

TEST_F(PythonFixtures, ViewsShareStorage) {
  Value v = load_pt(path("views.pt"));
  const at::Tensor& a = v.at("a").as_tensor();
  const at::Tensor& b = v.at("b").as_tensor();
  const at::Tensor& c = v.at("c").as_tensor();
  EXPECT_TRUE(a.equal(torch::arange(2, 5, torch::kFloat)));
  EXPECT_TRUE(c.equal(torch::arange(10, torch::kFloat).view({2, 5}).t()));
  EXPECT_TRUE(a.storage().is_alias_of(b.storage()));
  EXPECT_TRUE(c.storage().is_alias_of(b.storage()));
  EXPECT_EQ(v.at("e").as_tensor().numel(), 0);
}

TEST_F(PythonFixtures, EveryDtype) {
  Value v = load_pt(path("dtypes.pt"));
  const std::pair<const char*, at::ScalarType> types[] = {
      {"bf16", at::kBFloat16}, {"f16", at::kHalf},  {"f64", at::kDouble}, {"i8", at::kChar},
      {"u8", at::kByte},       {"i16", at::kShort}, {"i32", at::kInt},    {"i64", at::kLong}};
  for (const auto& [name, dtype] : types) {
    const at::Tensor& t = v.at(name).as_tensor();
    EXPECT_EQ(t.scalar_type(), dtype) << name;
    EXPECT_TRUE(t.equal((torch::arange(12) - 6).reshape({3, 4}).to(dtype))) << name;
  }
  EXPECT_TRUE(v.at("bool").as_tensor().equal(torch::tensor({true, false})));
}

TEST_F(PythonFixtures, ParameterAndNewerProtocols) {
  EXPECT_TRUE(load_pt(path("param.pt")).at("p").as_tensor().equal(torch::ones({3})));
  // A tensor with Python attributes is read (attributes dropped); a subclass is named.
  EXPECT_TRUE(load_pt(path("attr.pt")).at("t").as_tensor().equal(torch::arange(4.0)));
  try {
    load_pt(path("subclass.pt"));
    ADD_FAILURE() << "a tensor subclass was read in strict mode";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("Sub"), std::string::npos) << e.what();
  }
  for (const char* f : {"proto4.pt", "proto5.pt"}) {
    Value v = load_pt(path(f));
    EXPECT_TRUE(v.is_ordered_dict()) << f;
    EXPECT_TRUE(v.at("w").as_tensor().equal(torch::ones({2, 2}))) << f;
    EXPECT_EQ(v.at("f").as_double(), 0.5) << f;
  }
}

TEST_F(PythonFixtures, LegacyFormatIsAClearError) {
  try {
    load_pt(path("legacy.pt"));
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("legacy.pt"), std::string::npos) << e.what();
  }
}

// The fixture's LossScaler is a stand-in whose __init__ is not DeepSpeed's, but its pickle is the
// same NEWOBJ + BUILD, which strict mode accepts; the first global it refuses is the ZeroStageEnum
// (pickled as getattr(ZeroStageEnum, 'gradients') by Python >= 3.11).
TEST_F(PythonFixtures, DeepSpeedFileStrictRefusesTheUnknownClassByName) {
  try {
    load_pt(path("mp_rank_00_model_states.pt"));
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mp_rank_00_model_states.pt"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("'builtins.getattr'") != std::string::npos ||
                msg.find("'deepspeed.runtime.zero.config.ZeroStageEnum'") != std::string::npos)
        << msg;
  }
}

TEST_F(PythonFixtures, DeepSpeedFileTolerantReadsTheTensors) {
  ReadOptions opts;
  opts.mode = ReadMode::kTolerant;
  Value v = load_pt(path("mp_rank_00_model_states.pt"), opts);
  const Value& module = v.at("module");
  EXPECT_TRUE(
      module.at("0.weight").as_tensor().equal(torch::arange(6, torch::kFloat).reshape({2, 3})));
  EXPECT_EQ(module.length(), 7u);
  const ObjectData& scaler = v.at("loss_scaler").as_object();
  EXPECT_EQ(scaler.type, "deepspeed.runtime.fp16.loss_scaler.LossScaler");
  EXPECT_EQ(scaler.state.at("cur_scale").as_double(), 65536.0);
  EXPECT_EQ(scaler.state.at("cur_iter").as_int(), 12);
  // Python < 3.11 pickles an IntEnum member as ZeroStageEnum(2), newer ones as
  // getattr(ZeroStageEnum, 'gradients').
  const ObjectData& stage = v.at("zero_stage").as_object();
  if (stage.type == "builtins.getattr") {
    EXPECT_EQ(stage.args[0].as_object().type, "deepspeed.runtime.zero.config.ZeroStageEnum");
    EXPECT_EQ(stage.args[1].as_string(), "gradients");
  } else {
    EXPECT_EQ(stage.type, "deepspeed.runtime.zero.config.ZeroStageEnum");
    EXPECT_EQ(stage.args[0].as_int(), 2);
  }
  EXPECT_EQ(v.at("sparse_tensor_module_names").as_object().type, "builtins.set");
  EXPECT_EQ(v.at("args").as_object().type, "argparse.Namespace");
  EXPECT_EQ(v.at("global_steps").as_int(), 10);
  EXPECT_EQ(v.at("param_shapes")[0].at("0.weight").as_size(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(v.at("ds_config").at("fp16").at("enabled").as_bool(), true);
  // Only the module: the other keys' objects are not even expanded.
  ReadOptions only = opts;
  only.only_keys = {"module"};
  Value m = load_pt(path("mp_rank_00_model_states.pt"), only);
  EXPECT_EQ(m.length(), 1u);
  EXPECT_TRUE(m.at("module").equals(module));
}

}  // namespace
}  // namespace zrt::ckpt
