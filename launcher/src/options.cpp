// The accrun command line (docs/design.md §9, accrun(1)) with Boost.Program_options.
//
// Every value is taken as a string and converted here, so each bad value gets
// a message that names the option, says what is wrong and suggests the fix;
// Boost's own messages are replaced for the same reason.  The program and its
// arguments start at the first word that is not an option or an option's
// value (mpirun's rule), or after `--`.
#include "accrun/options.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>

#include "accrun/detect.hpp"
#include "accrun/hostfile.hpp"

namespace accrun::launcher {
namespace {

namespace po = boost::program_options;

// One option as the user sees it: "-n/--np", "--hostfile".
struct Shown {
  const char* long_name;
  const char* label;
};

po::options_description make_description() {
  po::options_description d;
  auto s = [] { return po::value<std::string>(); };
  // clang-format off
  d.add_options()
    ("np,n", s())
    ("hostfile", s())
    ("host,H", s())
    ("gpus-per-rank", s())
    ("resources-per-rank", po::value<std::vector<std::string>>())
    ("cpus-per-rank,c", s())
    ("npernode", s())
    ("accelerator-type", s())
    ("pod-blocks", s())
    ("pod-level", s())
    ("bind-to", s())
    ("report-bindings", po::bool_switch())
    ("visible-devices", s())
    ("num-gpus", s())
    ("resources", po::value<std::vector<std::string>>())
    ("host-accelerator-type", s())
    ("oversubscribe", po::bool_switch())
    ("export,x", po::value<std::vector<std::string>>())
    ("wdir", s())
    ("tag-output", po::bool_switch())
    ("output-dir", s())
    ("stdin", s())
    ("timeout", s())
    ("kill-grace", s())
    ("on-failure", s())
    ("dry-run", po::bool_switch())
    ("detect", po::bool_switch())
    ("json", po::bool_switch())
    ("topology", s())
    ("launch-agent", s())
    ("fanout", s())
    ("daemon-path", s())
    ("mpi", s())
    ("version", po::bool_switch())
    ("help,h", po::bool_switch())
    ("daemon", po::bool_switch());
  // clang-format on
  return d;
}

// How an option is named in messages: both spellings where it has two.
std::string shown(std::string_view long_name) {
  if (long_name == "np") return "-n/--np";
  if (long_name == "host") return "-H";
  if (long_name == "cpus-per-rank") return "-c/--cpus-per-rank";
  if (long_name == "export") return "-x";
  if (long_name == "help") return "--help";
  return "--" + std::string(long_name);
}

// Every spelling a user may type, for "did you mean" hints.
std::vector<std::string> all_spellings(const po::options_description& d) {
  std::vector<std::string> out;
  for (const auto& opt : d.options()) {
    if (opt->long_name() == "export") {
      out.push_back("-x");
      continue;
    }
    if (opt->long_name() == "host") {
      out.push_back("-H");
      continue;
    }
    if (opt->long_name() == "daemon") continue;
    out.push_back("--" + opt->long_name());
  }
  return out;
}

Status bad(std::string_view long_name, const std::string& what) {
  return invalid_argument("option '" + shown(long_name) + "': " + what);
}

Result<long long> parse_whole(std::string_view name, const std::string& text, long long min,
                              const char* example) {
  auto v = hostfiles::whole_number(text, min, example);
  if (!v) return bad(name, v.status().message());
  return *v;
}

// The longest --timeout and --kill-grace (accrun(1), --timeout and --kill-grace): past them the
// conversion to a deadline would overflow and fire at once.
constexpr double kMaxTimeoutS = 365.0 * 24 * 3600;  // one year
constexpr double kMaxKillGraceS = 24.0 * 3600;      // one day

Result<double> parse_seconds(std::string_view name, const std::string& text, double max,
                             const char* max_shown) {
  // Decimals (30, 0.5, 1e-3) only: strtod would also take hexadecimal
  // (0x10 is 16 s), "inf" and "nan".
  auto digits = [&](size_t from) {
    size_t j = from;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    return j;
  };
  const size_t sign = text[0] == '+' || text[0] == '-';
  size_t i = digits(sign);
  size_t mantissa = i - sign;
  if (i < text.size() && text[i] == '.') {
    size_t j = digits(i + 1);
    mantissa += j - i - 1;
    i = j;
  }
  if (mantissa > 0 && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    size_t j = i + 1 + (i + 1 < text.size() && (text[i + 1] == '+' || text[i + 1] == '-'));
    i = digits(j) > j ? digits(j) : text.size() + 1;
  }
  if (mantissa == 0 || i != text.size()) return bad(name, "'" + text + "' is not a number of seconds (e.g. 30 or 0.5)");
  if (text[0] == '-') return bad(name, "'" + text + "' is negative (give seconds, 0 or more)");
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  // Too small for a double (1e-400) is not 0, which means none.
  if (errno == ERANGE && v < 1) return bad(name, "'" + text + "' is less than a millisecond (give 0 or at least 0.001)");
  // Values that overflowed (ERANGE) land here too.
  if (!(v <= max)) {
    return bad(name, "'" + text + "' is more than " + std::to_string(static_cast<long long>(max)) + " seconds (" +
                         max_shown + "), the limit");
  }
  return v;
}

template <class E>
Result<E> parse_choice(std::string_view name, const std::string& text,
                       const std::vector<std::pair<std::string, E>>& choices) {
  std::vector<std::string> names;
  for (const auto& [n, v] : choices) {
    if (n == text) return v;
    names.push_back(n);
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i ? "|" : "") + names[i];
  std::string msg = "'" + text + "' is not one of " + list;
  if (auto near = hostfiles::closest_match(text, names)) msg += " (did you mean '" + *near + "'?)";
  return bad(name, msg);
}

bool valid_variable_name(std::string_view v) {
  if (v.empty() || std::isdigit(static_cast<unsigned char>(v[0]))) return false;
  return std::all_of(v.begin(), v.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Splits argv into the option words and the program's words.  The option
// table decides which options consume the next word as their value.  An
// option whose value is missing is refused here when the next word is
// another option (which would otherwise be taken for the value: a
// forgotten value before --dry-run ran the program), and so is one of the
// long options spelt with one dash (-host, -npernode), which would read as
// a short option with a value.
Status split_command(int argc, const char* const* argv, const po::options_description& d,
                     std::vector<std::string>& option_words, std::vector<std::string>& command) {
  // The option named `key` (without dashes, or a short "-n"), if any.
  // Boost's lookup throws where a name matches several (an empty one): no
  // option, then, for the parser proper to refuse in its own words.
  auto find = [&](const std::string& key) -> const po::option_description* {
    if (key.empty() || key == "-") return nullptr;
    try {
      return d.find_nothrow(key, false);
    } catch (const po::error&) {
      return nullptr;
    }
  };
  auto takes_value = [&](const std::string& key) {
    const po::option_description* od = find(key);
    return od != nullptr && od->semantic()->max_tokens() > 0;
  };
  auto known_long = [&](const std::string& word) {
    return word.size() > 2 && find(word.substr(2, word.find('=') - 2)) != nullptr;
  };
  auto is_option = [&](const std::string& word) {
    if (word == "-np" || word.compare(0, 4, "-np=") == 0) return true;
    if (word.compare(0, 2, "--") == 0) return known_long(word);
    // A short option alone (-n); "-nan" and "-1" are values.
    return word.size() == 2 && word[0] == '-' && find(word) != nullptr;
  };
  // The value of option word `i`, unless it is missing.
  auto value_of = [&](int& i, const std::string& option) -> Status {
    if (i + 1 >= argc) return Status();
    const std::string next = argv[i + 1];
    if (is_option(next)) {
      return invalid_argument("option '" + option + "': needs a value, and the next word, '" +
                              next + "', is an option (a value that begins with '-' is given as " +
                              option + (option.size() == 2 ? "VALUE)" : "=VALUE)"));
    }
    option_words.push_back(next);
    ++i;
    return Status();
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (int j = i + 1; j < argc; ++j) command.emplace_back(argv[j]);
      return Status();
    }
    if (a == "-np") a = "--np";  // mpirun's spelling
    if (a.compare(0, 4, "-np=") == 0) a = "-" + a;
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      option_words.push_back(a);
      if (a.find('=') == std::string::npos && takes_value(a.substr(2)))
        if (Status s = value_of(i, a); !s) return s;
      continue;
    }
    if (a.size() >= 2 && a[0] == '-') {
      if (a.size() > 2 && known_long("-" + a)) {
        return invalid_argument("unknown option '" + a + "' (did you mean '-" +
                                a.substr(0, a.find('=')) +
                                "'? accrun's long options take two dashes)");
      }
      option_words.push_back(a);
      if (a.size() == 2 && takes_value(a))
        if (Status s = value_of(i, a); !s) return s;
      continue;
    }
    for (int j = i; j < argc; ++j) command.emplace_back(argv[j]);
    return Status();
  }
  return Status();
}

// The option name Boost reports, without dashes.
std::string bare(std::string name) {
  while (!name.empty() && name[0] == '-') name.erase(0, 1);
  return name;
}

Status translate(const po::error& e, const po::options_description& d) {
  if (const auto* u = dynamic_cast<const po::unknown_option*>(&e)) {
    std::string name = u->get_option_name();
    std::string msg = "unknown option '" + name + "'";
    std::string word = name.substr(0, name.find('='));
    if (auto near = hostfiles::closest_match(word, all_spellings(d))) {
      msg += " (did you mean '" + *near + "'?)";
    } else {
      msg += " (see accrun --help)";
    }
    return invalid_argument(msg);
  }
  if (const auto* m = dynamic_cast<const po::multiple_occurrences*>(&e)) {
    return bad(bare(m->get_option_name()), "given more than once (give it once)");
  }
  if (const auto* s = dynamic_cast<const po::invalid_command_line_syntax*>(&e)) {
    std::string name = bare(s->get_option_name());
    switch (s->kind()) {
      case po::invalid_syntax::missing_parameter:
      case po::invalid_syntax::empty_adjacent_parameter:
        return bad(name, "needs a value (see accrun --help)");
      case po::invalid_syntax::extra_parameter:
        return bad(name, "takes no value");
      default:
        break;
    }
  }
  if (const auto* a = dynamic_cast<const po::ambiguous_option*>(&e)) {
    return invalid_argument("ambiguous option '" + a->get_option_name() + "'");
  }
  return invalid_argument(e.what());
}

Result<Options> convert(const po::variables_map& vm, std::vector<std::string> command) {
  Options o;
  auto str = [&](const char* k) -> const std::string* {
    auto it = vm.find(k);
    if (it == vm.end() || it->second.empty() || it->second.defaulted()) return nullptr;
    return &it->second.as<std::string>();
  };
  auto list = [&](const char* k) -> std::vector<std::string> {
    auto it = vm.find(k);
    if (it == vm.end() || it->second.empty()) return {};
    return it->second.as<std::vector<std::string>>();
  };
  auto flag = [&](const char* k) { return vm.count(k) != 0 && vm[k].as<bool>(); };

  o.help = flag("help");
  o.version = flag("version");
  o.detect = flag("detect");
  o.dry_run = flag("dry-run");
  o.json = flag("json");
  o.daemon = flag("daemon");
  o.report_bindings = flag("report-bindings");
  o.oversubscribe = flag("oversubscribe");
  o.tag_output = flag("tag-output");

  if (const auto* v = str("np")) {
    auto n = parse_whole("np", *v, 1, "-n 4");
    if (!n) return n.status();
    o.np = static_cast<int>(*n);
  }
  if (const auto* v = str("hostfile")) {
    if (v->empty()) return bad("hostfile", "needs a file name");
    o.hostfile = *v;
  }
  if (const auto* v = str("host")) {
    if (v->empty()) return bad("host", "needs a host list (e.g. -H node1:4,node2:4)");
    o.host_list = *v;
  }
  if (o.hostfile && o.host_list) {
    return invalid_argument("options '--hostfile' and '-H' both name hosts: give only one of them");
  }

  std::set<std::string> requested;
  if (const auto* v = str("gpus-per-rank")) {
    auto q = detect::Quantity::parse(*v);
    if (!q) return bad("gpus-per-rank", q.status().message() + " (e.g. --gpus-per-rank 1 or 0.5)");
    if (!q->is_zero()) {
      Status st = detect::validate_request("GPU", *q);
      if (!st) return bad("gpus-per-rank", st.message());
      o.per_rank.emplace_back("GPU", *q);
      requested.insert("GPU");
    }
  }
  for (const auto& item : list("resources-per-rank")) {
    auto r = hostfiles::parse_resource_list(item);
    if (!r) return bad("resources-per-rank", r.status().message());
    for (const auto& [name, q] : *r) {
      if (!requested.insert(name).second) {
        return bad("resources-per-rank", name + " is requested twice (give each resource once)");
      }
      if (q.is_zero()) continue;
      Status st = detect::validate_request(name, q);
      if (!st) return bad("resources-per-rank", st.message());
      o.per_rank.emplace_back(name, q);
    }
  }
  if (const auto* v = str("cpus-per-rank")) {
    auto n = parse_whole("cpus-per-rank", *v, 1, "-c 4");
    if (!n) return n.status();
    o.cpus_per_rank = static_cast<int>(*n);
  }
  if (const auto* v = str("npernode")) {
    auto n = parse_whole("npernode", *v, 1, "--npernode 8");
    if (!n) return n.status();
    o.npernode = static_cast<int>(*n);
  }
  if (const auto* v = str("accelerator-type")) {
    if (v->empty()) return bad("accelerator-type", "needs a type (e.g. --accelerator-type H100)");
    o.accelerator_type = *v;
  }
  if (const auto* v = str("pod-blocks")) {
    auto n = parse_whole("pod-blocks", *v, 1, "--pod-blocks 8");
    if (!n) return n.status();
    o.pod_blocks = static_cast<int>(*n);
  }
  if (const auto* v = str("pod-level")) {
    auto r = parse_choice<PodLevel>("pod-level", *v,
                                    {{"pod", PodLevel::kPod}, {"zone", PodLevel::kZone},
                                     {"region", PodLevel::kRegion}});
    if (!r) return r.status();
    if (o.pod_blocks == 0) {
      return bad("pod-level", "has no effect without --pod-blocks K (e.g. --pod-blocks 8 --pod-level " +
                                  *v + ")");
    }
    o.pod_level = *r;
  }
  if (const auto* v = str("bind-to")) {
    auto r = parse_choice<BindTo>("bind-to", *v,
                                  {{"none", BindTo::kNone}, {"core", BindTo::kCore},
                                   {"numa", BindTo::kNuma}, {"accelerator", BindTo::kAccelerator}});
    if (!r) return r.status();
    o.bind_to = *r;
  }
  if (const auto* v = str("visible-devices")) {
    auto r = parse_choice<Visibility>("visible-devices", *v,
                                      {{"own", Visibility::kOwn}, {"node", Visibility::kNode}});
    if (!r) return r.status();
    o.visible_devices = *r;
  }
  if (const auto* v = str("num-gpus")) {
    auto n = parse_whole("num-gpus", *v, 0, "--num-gpus 8");
    if (!n) return n.status();
    if (*n > hostfiles::kMaxDevicesPerResource) {
      return bad("num-gpus", "'" + *v + "' is more than " + std::to_string(hostfiles::kMaxDevicesPerResource) +
                                 " devices of one resource on a host (the limit)");
    }
    o.num_gpus = static_cast<int>(*n);
  }
  {
    std::set<std::string> seen;
    for (const auto& item : list("resources")) {
      auto r = hostfiles::parse_resource_list(item);
      if (!r) return bad("resources", r.status().message());
      for (const auto& [name, q] : *r) {
        if (!seen.insert(name).second) return bad("resources", name + " is given twice");
        if (!q.is_whole()) {
          return bad("resources", "a host has whole devices: " + name + "=" + q.str() +
                                      " is not a whole number");
        }
        if (q.whole_part() > hostfiles::kMaxDevicesPerResource) {
          return bad("resources", name + "=" + q.str() + ": more than " +
                                      std::to_string(hostfiles::kMaxDevicesPerResource) +
                                      " devices of one resource on a host (the limit)");
        }
        o.resources.emplace_back(name, q);
      }
    }
  }
  if (const auto* v = str("host-accelerator-type")) {
    if (v->empty()) return bad("host-accelerator-type", "needs a type (e.g. H100)");
    o.host_accelerator_type = *v;
  }
  if (const auto* v = str("topology")) {
    if (v->empty()) return bad("topology", "needs an hwloc XML file");
    o.topology = *v;
  }
  for (const auto& item : list("export")) {
    auto eq = item.find('=');
    std::string name = item.substr(0, eq);
    if (!valid_variable_name(name)) {
      return bad("export", "'" + name + "' is not a variable name (write -x VAR or -x VAR=value)");
    }
    if (eq == std::string::npos) {
      o.exports.emplace_back(name, std::nullopt);
    } else {
      o.exports.emplace_back(name, item.substr(eq + 1));
    }
  }
  if (const auto* v = str("wdir")) {
    if (v->empty()) return bad("wdir", "needs a directory");
    o.wdir = *v;
  }
  if (const auto* v = str("output-dir")) {
    if (v->empty()) return bad("output-dir", "needs a directory");
    o.output_dir = *v;
  }
  if (const auto* v = str("stdin")) {
    if (*v == "none") {
      o.stdin_mode = StdinMode::kNone;
    } else if (*v == "all") {
      o.stdin_mode = StdinMode::kAll;
    } else {
      auto n = parse_whole("stdin", *v, 0, "--stdin 0, --stdin all or --stdin none");
      const bool digits = !v->empty() && std::all_of(v->begin(), v->end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!n) return digits ? n.status() : bad("stdin", "'" + *v + "' is not none, all or a rank number");
      o.stdin_mode = StdinMode::kRank;
      o.stdin_rank = static_cast<int>(*n);
    }
  }
  if (const auto* v = str("timeout")) {
    auto s = parse_seconds("timeout", *v, kMaxTimeoutS, "one year");
    if (!s) return s.status();
    // Shown in milliseconds at the end, a shorter one would read as 0 (no timeout).
    if (*s > 0 && *s < 0.001)
      return bad("timeout", "'" + *v + "' is less than a millisecond (0 means no timeout; give at least 0.001)");
    o.timeout_s = *s;
  }
  if (const auto* v = str("kill-grace")) {
    auto s = parse_seconds("kill-grace", *v, kMaxKillGraceS, "one day");
    if (!s) return s.status();
    o.kill_grace_s = *s;
  }
  if (const auto* v = str("launch-agent")) {
    if (v->find_first_not_of(" \t") == std::string::npos)
      return bad("launch-agent", "needs a command (e.g. --launch-agent 'ssh -F cfg', or a template with {host} and {cmd})");
    o.launch_agent = *v;
  }
  if (const auto* v = str("fanout")) {
    auto n = parse_whole("fanout", *v, 1, "--fanout 32");
    if (!n) return n.status();
    if (*n > 1024) return bad("fanout", "'" + *v + "' is more than 1024 launch connections per process");
    o.fanout = static_cast<int>(*n);
  }
  if (const auto* v = str("daemon-path")) {
    if (v->empty()) return bad("daemon-path", "needs the path of accrun on the other hosts");
    o.daemon_path = *v;
  }
  if (const auto* v = str("mpi")) {
    auto r = parse_choice<MpiMode>("mpi", *v, {{"pmix", MpiMode::kPmix}, {"pmi", MpiMode::kPmi}, {"auto", MpiMode::kAuto}});
    if (!r) return r.status();
    o.mpi = *r;
  }
  if (const auto* v = str("on-failure")) {
    auto r = parse_choice<OnFailure>("on-failure", *v,
                                     {{"kill", OnFailure::kKill}, {"continue", OnFailure::kContinue}});
    if (!r) return r.status();
    o.on_failure = *r;
  }

  o.command = std::move(command);
  if (o.help || o.version) return o;
  if (o.json && !o.detect && !o.dry_run) {
    return invalid_argument("option '--json' works only with --detect or --dry-run");
  }
  if (o.detect && o.dry_run) {
    return invalid_argument("options '--detect' and '--dry-run' are separate modes: give only one");
  }
  // --detect starts nothing: a program or a rank count would be ignored.
  if (o.detect && !o.command.empty()) {
    return invalid_argument("option '--detect' runs no program ('" + o.command.front() +
                            "' given): it prints the hosts' accelerators; drop the program, or drop --detect to run it");
  }
  if (o.detect && o.np) {
    return invalid_argument("option '--detect' starts no ranks: drop '-n/--np " + std::to_string(*o.np) + "'");
  }
  // Nor would the options that place, bind or run ranks do anything.
  if (o.detect) {
    for (const char* k : {"gpus-per-rank", "resources-per-rank", "cpus-per-rank", "npernode",
                          "accelerator-type", "pod-blocks", "pod-level", "bind-to",
                          "report-bindings", "visible-devices", "oversubscribe", "wdir",
                          "tag-output", "output-dir", "stdin", "kill-grace", "on-failure", "mpi"}) {
      auto it = vm.find(k);
      if (it == vm.end() || it->second.empty() || it->second.defaulted()) continue;
      return invalid_argument("option '--detect' places and starts no ranks: drop '" + shown(k) +
                              "' (--dry-run shows what each rank would get)");
    }
  }
  if (o.np && o.stdin_mode == StdinMode::kRank && o.stdin_rank >= *o.np) {
    return bad("stdin", "rank " + std::to_string(o.stdin_rank) + " does not exist with -n " +
                            std::to_string(*o.np) + " (ranks are 0.." + std::to_string(*o.np - 1) +
                            ")");
  }
  if (!o.detect && !o.daemon && !o.dry_run && o.command.empty()) {
    return invalid_argument("no program to run (usage: accrun [options] -n N program [args...])");
  }
  return o;
}

// Messages quote what the user typed: never with raw control bytes.
Status printable_status(const Status& s) { return Status(s.code(), hostfiles::printable(s.message())); }

}  // namespace

Status check_environment(char** envp) {
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string name(entry.substr(0, eq));
    const std::string value(entry.substr(eq + 1));
    if (name == "ACCRUN_LOG" && !value.empty()) {
      const std::vector<std::string> levels = {"error", "warn", "info", "debug"};
      if (std::find(levels.begin(), levels.end(), value) != levels.end()) continue;
      std::string msg = "environment variable ACCRUN_LOG='" + value + "' is not one of error|warn|info|debug";
      if (auto near = hostfiles::closest_match(value, levels)) msg += " (did you mean '" + *near + "'?)";
      return printable_status(invalid_argument(msg));
    }
    if (name == "ACCRUN_AGENT_TIMEOUT" && !value.empty()) {
      auto s = parse_seconds("timeout", value, 86400, "a day");
      if (!s || *s < 0.001 || *s >= 86400) {
        return printable_status(invalid_argument("environment variable ACCRUN_AGENT_TIMEOUT='" + value +
                                                 "' is not a number of seconds from 0.001 to below 86400 (e.g. 60)"));
      }
    }
  }
  return Status();
}

Status check_tmpdir(char** envp) {
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "TMPDIR=", 7) != 0 || (*e)[7] == '\0') continue;
    const std::string dir = *e + 7;
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status();
    const std::string why =
        ::stat(dir.c_str(), &st) != 0 ? std::strerror(errno) : "not a directory";
    return printable_status(
        invalid_argument("environment variable TMPDIR='" + dir + "': " + why +
                         " (accrun makes each job's directory there; point TMPDIR at a "
                         "directory, or unset it for /tmp); nothing was started"));
  }
  return Status();
}

std::string forward_open_mpi_settings(Options& o, char** envp) {
  // What a launcher sets in each process it starts: PMIx's and PMI's
  // identity and server (Open MPI 4 and 5, PRRTE, Slurm's PMIx and PMI-2,
  // Hydra, accrun itself) and Open MPI's own world.
  static constexpr std::string_view kJobMarks[] = {"PMIX_RANK",  "PMIX_NAMESPACE", "PMIX_SERVER_URI",
                                                   "PMI_RANK",   "PMI_FD",         "PMI_PORT",
                                                   "PMI_ID",     "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_orte_hnp_uri",
                                                   "OMPI_MCA_ess"};
  std::vector<std::pair<std::string, std::string>> settings;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = entry.substr(0, eq);
    for (std::string_view mark : kJobMarks)
      if (name.substr(0, mark.size()) == mark) return std::string(name);
    // Open MPI's settings and its PMIx library's (both ends of a rank's
    // PMIx connection read PMIX_MCA_*: the agents apply them too).
    const std::string_view prefix = name.substr(0, 9);
    if (name.size() > 9 && (prefix == "OMPI_MCA_" || prefix == "PMIX_MCA_") &&
        valid_variable_name(name))
      settings.emplace_back(std::string(name), std::string(entry.substr(eq + 1)));
  }
  for (auto& setting : settings) {
    const bool named = std::any_of(o.exports.begin(), o.exports.end(),
                                   [&](const auto& x) { return x.first == setting.first; });
    if (!named) o.exports.emplace_back(std::move(setting.first), std::move(setting.second));
  }
  return "";
}

Result<Options> parse_options(int argc, const char* const* argv) {
  const po::options_description d = make_description();
  std::vector<std::string> words;
  std::vector<std::string> command;
  if (Status s = split_command(argc, argv, d, words, command); !s) return printable_status(s);
  po::variables_map vm;
  try {
    const int style = po::command_line_style::allow_long | po::command_line_style::long_allow_adjacent |
                      po::command_line_style::long_allow_next | po::command_line_style::allow_short |
                      po::command_line_style::short_allow_adjacent |
                      po::command_line_style::short_allow_next |
                      po::command_line_style::allow_dash_for_short;
    po::store(po::command_line_parser(words).options(d).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return printable_status(translate(e, d));
  }
  auto o = convert(vm, std::move(command));
  if (!o) return printable_status(o.status());
  return o;
}

std::string usage() {
  return R"(usage: accrun [options] [-n N] program [args...]
       accrun --detect [--json] [detection options]
       accrun --dry-run [--json] [options] [program [args...]]

The program and its arguments start at the first word that is not an option
(or after --); everything after it belongs to the program.

Placement:
  -n, --np N                 number of ranks (default: the hosts' slots; 1 on
                             the local host without a hostfile)
  --hostfile FILE            hosts, slots, accelerators and pods (accrun-hostfile(5))
  -H, --host host[:slots][,...]
                             hosts on the command line (node[01-04] ranges allowed)
  --gpus-per-rank Q          GPUs for each rank: whole, or a fraction such as 0.5
  --resources-per-rank NAME=Q[,...]
                             any resource per rank: GPU, TPU, HPU, NPU,
                             neuron_cores (NAME:Q also accepted)
  -c, --cpus-per-rank N      cores for each rank (sets OMP_NUM_THREADS)
  --npernode N               at most N ranks on each host
  --accelerator-type T       only hosts whose accelerators are of type T (H100, ...)
  --pod-blocks K             every K consecutive ranks inside one pod group
  --pod-level pod|zone|region
                             the level --pod-blocks groups by (default pod)
  --bind-to none|core|numa|accelerator
                             CPU binding (default accelerator for ranks with
                             accelerators, else core with -c, else none)
  --report-bindings          print each rank's CPUs and devices at start
  --visible-devices own|node each rank sees its own devices (default), or all
                             of the job's devices on its host, its own first
  --oversubscribe            allow more ranks than a host's slots

This host (logical overrides, `ray start` style):
  --num-gpus N               this host has N GPUs (at most 4096)
  --resources NAME=Q[,...]   this host has Q of each resource (at most 4096)
  --host-accelerator-type T  this host's accelerators are of type T
  --topology FILE.xml        read this host's topology from an hwloc XML file

Ranks' environment and I/O:
  -x, --export VAR[=value]   pass VAR (from accrun's environment, or set to
                             value) to every rank; repeatable
  --wdir DIR                 ranks start in DIR
  --tag-output               prefix each output line with [rank] or [host:rank]
  --output-dir DIR           write DIR/rank.R/stdout and stderr
  --stdin none|all|RANK      who reads accrun's standard input (default 0)

Failure:
  --timeout S                stop the job after S seconds (exit status 124;
                             at most 31536000, one year)
  --kill-grace S             seconds between SIGTERM and SIGKILL (default 5;
                             at most 86400, one day)
  --on-failure kill|continue what a rank's failure does to the others (default kill)

MPI:
  --mpi pmix|pmi|auto        what the ranks' MPI library starts through: PMIx
                             (Open MPI), the PMI-1/PMI-2 wire protocols
                             (MPICH, Intel MPI, MVAPICH) or both (default auto)

Several hosts (accrun --daemon is started on each, as a tree):
  --launch-agent CMD         how to reach a host: CMD HOST 'accrun --daemon'
                             (default 'ssh -o BatchMode=yes'), or a template
                             holding {host} and {cmd}
  --fanout K                 each process starts at most K agents (default 32)
  --daemon-path PATH         where accrun is on the other hosts (default: the
                             same path as here)

Modes:
  --dry-run                  print the placement plan; start nothing
  --detect                   print what this host has (with --hostfile or -H:
                             every listed host, each detected on itself)
  --json                     JSON output for --dry-run and --detect
  --version                  the version and the optional parts built
  -h, --help                 this text

See accrun(1), accrun-hostfile(5) and accrun(7).
)";
}

}  // namespace accrun::launcher
