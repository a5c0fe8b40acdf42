// The PMI-1 and PMI-2 wire protocols (launcher/src/pmi/): recorded client
// conversations replayed against the server and the job's PMI key-value
// space, malformed and wrong use, the process mapping string, and fences
// through a router as across hosts.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pmi/pmi_host.hpp"
#include "pmi/pmi_server.hpp"

namespace accrun::launcher::pmi {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

// What the service told the agent.
struct Recorder {
  std::vector<std::pair<int, std::string>> misused;
  std::vector<std::pair<int, int>> aborted;  // (rank, status)
  std::vector<int> finalized;
  PmiEvents events() {
    PmiEvents ev;
    ev.misused = [this](int r, const std::string& how) { misused.emplace_back(r, how); };
    ev.aborted = [this](int r, int status, const std::string&) { aborted.emplace_back(r, status); };
    ev.finalized = [this](int r) { finalized.push_back(r); };
    return ev;
  }
};

// N ranks on one host, each with a connection whose replies collect in out[r].
struct Job {
  PmiJobInfo info;
  Recorder rec;
  PmiEvents ev;
  std::unique_ptr<PmiJobSpace> space;
  std::vector<std::unique_ptr<PmiConnection>> conns;
  std::vector<std::string> out;

  explicit Job(int n, std::string kvsname = "accrun.test", int local = -1, std::string host = "") {
    info.kvsname = std::move(kvsname);
    info.size = n;
    info.universe_size = n;
    info.process_mapping = process_mapping(std::vector<int>(static_cast<size_t>(n), 0));
    ev = rec.events();
    space = std::make_unique<PmiJobSpace>(local < 0 ? n : local, &ev, std::move(host));
    out.resize(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
      conns.push_back(std::make_unique<PmiConnection>(r, &info, space.get(),
                                                      [this, r](std::string_view b) { out[r].append(b); }));
  }
  // Feeds `bytes` to rank r and returns (and clears) what it answered.
  std::string send(int r, const std::string& bytes, bool* go_on = nullptr) {
    bool ok = conns[static_cast<size_t>(r)]->feed(bytes.data(), bytes.size());
    if (go_on) *go_on = ok;
    return take(r);
  }
  std::string take(int r) { return std::exchange(out[static_cast<size_t>(r)], std::string()); }
};

std::string v2(const std::string& body) {
  char head[8];
  std::snprintf(head, sizeof head, "%-6zu", body.size());
  return std::string(head, 6) + body;
}

// The fields of one reply: a PMI-1 line, or a framed PMI-2 message.
Fields fields_of(const std::string& reply) {
  if (reply.rfind("cmd=", 0) == 0) {
    EXPECT_EQ(reply.back(), '\n') << reply;
    auto f = parse_v1(std::string_view(reply).substr(0, reply.size() - 1));
    EXPECT_TRUE(f.has_value()) << reply;
    return f.value_or(Fields{});
  }
  EXPECT_GE(reply.size(), 6U) << reply;
  if (reply.size() < 6) return {};
  EXPECT_EQ(std::stoul(reply.substr(0, 6)), reply.size() - 6) << reply;
  auto f = parse_v2(std::string_view(reply).substr(6));
  EXPECT_TRUE(f.has_value()) << reply;
  return f.value_or(Fields{});
}

std::optional<std::string> field(const Fields& f, const std::string& key) {
  for (const auto& [k, v] : f)
    if (k == key) return v;
  return std::nullopt;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

// One recorded exchange: what the rank wrote, what the recorded server
// answered, and the fields where accrun's answer differs on purpose.
struct Step {
  std::string sent;
  std::string expected;
  Fields overrides;
};

std::map<int, std::vector<Step>> load(const std::string& name, std::string* kvsname) {
  std::ifstream in(std::string(ACCRUN_FIXTURES_DIR) + "/pmi/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::map<int, std::vector<Step>> steps;
  int rank = -1;
  Fields pending;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("rank ", 0) == 0) {
      rank = std::stoi(line.substr(5));
    } else if (line.rfind("> ", 0) == 0) {
      steps[rank].push_back({unescape(line.substr(2)), "", {}});
    } else if (line.rfind("! ", 0) == 0) {
      std::string kv = line.substr(2);
      size_t eq = kv.find('=');
      steps[rank].back().overrides.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (line.rfind("< ", 0) == 0) {
      steps[rank].back().expected += unescape(line.substr(2));
    }
  }
  // The job's name as the recording has it.
  for (auto& [r, s] : steps)
    for (auto& st : s) {
      auto f = st.expected.rfind("cmd=my_kvsname", 0) == 0 ? parse_v1(st.expected.substr(0, st.expected.size() - 1))
                                                            : std::nullopt;
      if (f) *kvsname = field(*f, "kvsname").value_or("");
      size_t at = st.expected.find("jobid=");
      if (kvsname->empty() && at != std::string::npos)
        *kvsname = st.expected.substr(at + 6, st.expected.find(';', at) - at - 6);
    }
  return steps;
}

// Replays every rank's side of a recording, round robin: a rank whose
// reply has not come (it waits in a fence) lets the others go on.  Each
// reply must carry every field of the recorded one, with the recorded
// value unless the recording says accrun differs there.
void replay(const std::string& name, const std::string& mapping) {
  std::string kvsname;
  auto steps = load(name, &kvsname);
  ASSERT_FALSE(steps.empty());
  ASSERT_FALSE(kvsname.empty());
  Job job(static_cast<int>(steps.size()), kvsname);
  job.info.process_mapping = mapping;
  std::map<int, size_t> next;
  std::map<int, bool> waiting;
  size_t replies = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (auto& [r, list] : steps) {
      if (waiting[r]) {
        std::string got = job.take(r);
        if (got.empty()) continue;
        // The reply to the step that was waiting.
        const Step& st = list[next[r] - 1];
        Fields want = fields_of(st.expected), have = fields_of(got);
        EXPECT_EQ(field(have, "cmd"), field(want, "cmd")) << name << " rank " << r << ": " << got;
        waiting[r] = false;
        ++replies;
        progress = true;
      }
      while (!waiting[r] && next[r] < list.size()) {
        const Step& st = list[next[r]++];
        bool go_on = false;
        std::string got = job.send(r, st.sent, &go_on);
        EXPECT_TRUE(go_on) << name << " rank " << r << " after " << st.sent;
        progress = true;
        if (got.empty()) {
          ASSERT_FALSE(st.expected.empty()) << "no reply to " << st.sent;
          waiting[r] = true;
          break;
        }
        ++replies;
        Fields want = fields_of(st.expected), have = fields_of(got);
        for (const auto& [k, v] : want) {
          std::string expect = v;
          if (auto o = field(st.overrides, k)) expect = *o;
          EXPECT_EQ(field(have, k).value_or("<missing>"), expect)
              << name << " rank " << r << ": field " << k << " of the reply to " << st.sent << "got " << got;
        }
      }
    }
  }
  size_t total = 0;
  for (auto& [r, list] : steps) {
    EXPECT_EQ(next[r], list.size()) << name << ": rank " << r << " got stuck";
    EXPECT_FALSE(waiting[r]) << name << ": rank " << r << " never got its reply";
    total += list.size();
  }
  EXPECT_EQ(replies, total);
  EXPECT_TRUE(job.rec.misused.empty());
  EXPECT_EQ(job.rec.finalized.size(), steps.size());
}

TEST(PmiRecorded, MpichPmi1ThreeRanks) { replay("mpich-pmi1-3ranks.txt", "(vector,(0,1,1))"); }

TEST(PmiRecorded, Pmi2ClientTwoRanks) { replay("pmi2-client-2ranks.txt", "(vector,(0,1,1))"); }

TEST(PmiParse, Pmi1Lines) {
  auto f = parse_v1("cmd=put kvsname=k key=a value=x=y");
  ASSERT_TRUE(f);
  EXPECT_EQ(field(*f, "value"), "x=y");
  EXPECT_FALSE(parse_v1("cmd=put garbage"));
  EXPECT_FALSE(parse_v1(""));
  EXPECT_FALSE(parse_v1("=x"));
}

TEST(PmiParse, Pmi2MessagesAndEscapes) {
  auto f = parse_v2("cmd=kvs-put;key=a;value=x;;y;;;");
  ASSERT_TRUE(f);
  EXPECT_EQ(field(*f, "value"), "x;y;");
  EXPECT_FALSE(parse_v2("cmd=kvs-put;key=a"));  // no final ';'
  EXPECT_FALSE(parse_v2("cmd=x;novalue;"));
  EXPECT_FALSE(parse_v2(""));
}

TEST(PmiMapping, BlocksAsMpichDecodesThem) {
  EXPECT_EQ(process_mapping({0, 0, 0, 0}), "(vector,(0,1,4))");
  EXPECT_EQ(process_mapping({0, 0, 1, 1, 2, 2}), "(vector,(0,3,2))");
  EXPECT_EQ(process_mapping({0, 0, 0, 1}), "(vector,(0,1,3),(1,1,1))");
  EXPECT_EQ(process_mapping({0, 1, 0, 1}), "(vector,(0,2,1),(0,2,1))");
}

TEST(PmiServer, Pmi2ValueWithSemicolonsAndThreadIdRoundTrip) {
  Job job(1);
  job.send(0, "cmd=init pmi_version=2 pmi_subversion=0\n");
  job.send(0, v2("cmd=kvs-put;thrid=7;key=k;value=a;;b;"));
  Fields f = fields_of(job.send(0, v2("cmd=kvs-fence;thrid=8;")));
  EXPECT_EQ(field(f, "thrid"), "8");
  EXPECT_EQ(field(f, "rc"), "0");
  std::string raw = job.send(0, v2("cmd=kvs-get;thrid=9;key=k;"));
  EXPECT_NE(raw.find("thrid=9;"), std::string::npos) << raw;
  EXPECT_NE(raw.find("value=a;;b;"), std::string::npos) << raw;
  f = fields_of(raw);
  EXPECT_EQ(field(f, "value"), "a;b");
  EXPECT_EQ(field(f, "found"), "TRUE");
  // A message may arrive a byte at a time.
  std::string m = v2("cmd=job-getid;");
  std::string got;
  for (char c : m) got += job.send(0, std::string(1, c));
  EXPECT_EQ(field(fields_of(got), "jobid"), "accrun.test");
}

TEST(PmiServer, MissingKeyIsAnAnswerNotMisuse) {
  Job job(1);
  job.send(0, "cmd=init pmi_version=1 pmi_subversion=1\n");
  Fields f = fields_of(job.send(0, "cmd=get kvsname=accrun.test key=nope\n"));
  EXPECT_EQ(field(f, "rc"), "-1");
  EXPECT_TRUE(job.rec.misused.empty());
  job.send(0, "cmd=init pmi_version=2 pmi_subversion=0\n");  // a second init is misuse
  EXPECT_EQ(job.rec.misused.size(), 1U);
}

// Each malformed or wrong-use conversation gets an rc=-1 reply naming the
// problem, a report to the agent, and the connection closed.
struct Bad {
  const char* name;
  std::vector<std::string> sends;
  const char* reply_cmd;
  const char* says;  // in the reply and in the report
};

class PmiMalformed : public ::testing::TestWithParam<Bad> {};

TEST_P(PmiMalformed, ErrorToTheRankAndTheAgent) {
  const Bad& b = GetParam();
  Job job(1);
  std::string last;
  bool go_on = true;
  for (const std::string& s : b.sends) {
    ASSERT_TRUE(go_on) << "closed before the last send";
    last = job.send(0, s, &go_on);
  }
  EXPECT_FALSE(go_on) << b.name;
  Fields f = fields_of(last);
  EXPECT_EQ(field(f, "cmd"), b.reply_cmd) << last;
  EXPECT_EQ(field(f, "rc"), "-1") << last;
  ASSERT_EQ(job.rec.misused.size(), 1U);
  EXPECT_EQ(job.rec.misused[0].first, 0);
  EXPECT_NE(job.rec.misused[0].second.find(b.says), std::string::npos) << job.rec.misused[0].second;
  // Nothing more is read from it.
  EXPECT_FALSE(job.conns[0]->feed("cmd=get_maxes\n", 14));
  EXPECT_TRUE(job.take(0).empty());
}

const std::string kInit1 = "cmd=init pmi_version=1 pmi_subversion=1\n";
const std::string kInit2 = "cmd=init pmi_version=2 pmi_subversion=0\n";

INSTANTIATE_TEST_SUITE_P(
    Conversations, PmiMalformed,
    ::testing::Values(
        Bad{"garbage", {"hello\n"}, "error", "malformed PMI-1 line"},
        Bad{"no_init", {"cmd=get_maxes\n"}, "error", "must be init"},
        Bad{"version3", {"cmd=init pmi_version=3 pmi_subversion=0\n"}, "response_to_init", "version '3'"},
        Bad{"unknown1", {kInit1, "cmd=frobnicate\n"}, "error", "unknown PMI-1 command 'frobnicate'"},
        Bad{"long_line", {kInit1, std::string(5000, 'x')}, "error", "longer than"},
        Bad{"other_kvs", {kInit1, "cmd=put kvsname=other key=a value=b\n"}, "put_result", "not this job's"},
        Bad{"long_value", {kInit1, "cmd=put kvsname=accrun.test key=a value=" + std::string(1025, 'v') + "\n"},
            "put_result", "at most 1024"},
        Bad{"put_after_commit",
            {kInit1, "cmd=put kvsname=accrun.test key=a value=1\n", "cmd=barrier_in\n",
             "cmd=put kvsname=accrun.test key=a value=2\n"},
            "put_result", "after a fence committed it"},
        Bad{"after_finalize", {kInit1, "cmd=finalize\n", "cmd=get_maxes\n"}, "error", "after finalize"},
        Bad{"bad_length", {kInit2, "abcdefcmd=x;"}, "error", "length in 6 characters"},
        Bad{"huge_length", {kInit2, "999999"}, "error", "at most 65536"},
        Bad{"unterminated", {kInit2, v2("cmd=kvs-put;key=a;value=b")}, "error", "malformed PMI-2 message"},
        Bad{"unknown2", {kInit2, v2("cmd=frobnicate;")}, "frobnicate-response", "unknown PMI-2 command"},
        Bad{"wrong_rank", {kInit2, v2("cmd=fullinit;pmirank=5;threaded=FALSE;")}, "fullinit-response",
            "this socket is rank 0"},
        Bad{"put_after_commit2",
            {kInit2, v2("cmd=kvs-put;key=a;value=1;"), v2("cmd=kvs-fence;"), v2("cmd=kvs-put;key=a;value=2;")},
            "kvs-put-response", "after a fence committed it"}),
    [](const ::testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });

TEST(PmiFence, RankThatBarriersTwiceFailsAndTheOthersAreReleased) {
  Job job(3);
  for (int r = 0; r < 3; ++r) job.send(r, kInit1);
  EXPECT_TRUE(job.send(1, "cmd=barrier_in\n").empty());
  bool go_on = true;
  Fields f = fields_of(job.send(0, "cmd=barrier_in\ncmd=barrier_in\n", &go_on));
  EXPECT_FALSE(go_on);
  EXPECT_EQ(field(f, "cmd"), "barrier_out");
  EXPECT_EQ(field(f, "rc"), "-1");
  EXPECT_NE(field(f, "msg").value_or("").find("twice"), std::string::npos);
  ASSERT_EQ(job.rec.misused.size(), 1U);
  EXPECT_EQ(job.rec.misused[0].first, 0);
  // Rank 1 waited; rank 2 arrives later: neither hangs.
  f = fields_of(job.take(1));
  EXPECT_EQ(field(f, "cmd"), "barrier_out");
  EXPECT_EQ(field(f, "rc"), "-1");
  f = fields_of(job.send(2, "cmd=barrier_in\n"));
  EXPECT_EQ(field(f, "rc"), "-1");
  EXPECT_NE(field(f, "msg").value_or("").find("rank_0"), std::string::npos);
}

TEST(PmiFence, RankLeavingWithoutFinalizeReleasesTheOthers) {
  Job job(2);
  job.send(0, kInit1);
  job.send(1, kInit1);
  EXPECT_TRUE(job.send(0, "cmd=barrier_in\n").empty());
  EXPECT_FALSE(job.conns[1]->closed_cleanly());
  job.space->poison(1,
                    "closed its PMI connection without finalize");  // what PmiService does at EOF
  Fields f = fields_of(job.take(0));
  EXPECT_EQ(field(f, "rc"), "-1");
}

TEST(PmiFence, AbortCarriesTheExitCode) {
  Job job(2);
  job.send(0, kInit1);
  bool go_on = false;
  EXPECT_TRUE(job.send(0, "cmd=abort exitcode=7\n", &go_on).empty());
  EXPECT_TRUE(go_on);  // the socket stays open until the rank goes
  ASSERT_EQ(job.rec.aborted.size(), 1U);
  EXPECT_EQ(job.rec.aborted[0], std::make_pair(0, 7));
  job.send(1, kInit1);
  EXPECT_EQ(field(fields_of(job.send(1, "cmd=barrier_in\n")), "rc"), "-1");
}

// The keys and values one host's ranks put are bounded: past 16 MiB a put
// is wrong use (before: the agent's memory grew without bound, and a fence
// answer over the wire's frame limit dropped the host).
TEST(PmiServer, PutsPastTheHostsBoundAreWrongUse) {
  Job job(1);
  job.send(0, kInit1);
  const std::string value(1000, 'v');
  std::size_t held = 0, next = 0;  // bytes put, and those of the put refused
  Fields f;
  for (int k = 0; k < 100000; ++k) {
    const std::string key = "k" + std::to_string(k);
    f = fields_of(job.send(0, "cmd=put kvsname=accrun.test key=" + key + " value=" + value + "\n"));
    next = key.size() + value.size();
    if (field(f, "rc") != "0") break;
    held += next;
  }
  EXPECT_EQ(field(f, "rc"), "-1");
  EXPECT_NE(field(f, "msg").value_or("").find("past_16_MiB"), std::string::npos)
      << field(f, "msg").value_or("");
  EXPECT_LE(held, PmiJobSpace::kMaxHostBytes);
  EXPECT_GT(held + next, PmiJobSpace::kMaxHostBytes);
  ASSERT_EQ(job.rec.misused.size(), 1U);
}

// A rank that sends requests without reading the replies fills its socket:
// the reply that does not fit ends the connection instead of being cut
// short and run into the next one (before: after the rank read what was
// there, later replies followed the cut one, a line that does not parse),
// and its host's fences fail saying why.
TEST(PmiService, ARankThatLeavesItsRepliesUnreadIsCutOffNotAnsweredGarbled) {
  PmiJobInfo info;
  info.kvsname = "accrun.test";
  info.size = info.universe_size = 2;
  info.process_mapping = process_mapping({0, 0});
  Recorder rec;
  PmiService svc(info, 2, rec.events());
  Env env;
  Result<int> child = svc.prepare(0, env);
  ASSERT_TRUE(child.is_ok());
  const int fd = *child;
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  auto say = [&](const std::string& line) {
    const ssize_t n = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
    svc.on_readable(0);
    return n == static_cast<ssize_t>(line.size());
  };
  ASSERT_TRUE(say(kInit1));
  for (int i = 0; i < 100000 && say("cmd=get_maxes\n"); ++i) {
  }
  std::string got;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  say("cmd=get_maxes\n");  // one more, now that the rank reads
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  // Every whole line is a whole reply; only the last may be cut short.
  std::size_t at = 0, lines = 0;
  for (std::size_t nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1, ++lines)
    ASSERT_EQ(
        got.compare(at, 21, "cmd=response_to_init ") == 0 || got.compare(at, 10, "cmd=maxes ") == 0,
        true)
        << "line " << lines << ": " << got.substr(at, nl - at);
  EXPECT_GT(lines, 100u);
  bool failed = false;
  std::string why;
  svc.space().fence(1, [&](bool ok, const std::string& w) {
    failed = !ok;
    why = w;
  });
  EXPECT_TRUE(failed);
  EXPECT_NE(why.find("rank 0 left its PMI replies unread"), std::string::npos) << why;
}

// A fence is the whole job's: once a rank has finalized, a later fence of
// another rank fails at once instead of waiting for it forever.
TEST(PmiFence, AFenceAfterARankFinalizedFails) {
  Job job(2);
  job.send(0, kInit1);
  job.send(1, kInit1);
  EXPECT_EQ(field(fields_of(job.send(0, "cmd=finalize\n")), "rc"), "0");
  Fields f = fields_of(job.send(1, "cmd=barrier_in\n"));
  EXPECT_EQ(field(f, "rc"), "-1");
  EXPECT_NE(field(f, "msg").value_or("").find("rank_0_finalized"), std::string::npos)
      << field(f, "msg").value_or("");
}

// The router's answer may come after the job's PMI space is gone (an
// agent of a tree serves its links after its own ranks ended): it is
// dropped, not written into freed memory.
TEST(PmiFence, ARouterAnswerAfterTheSpaceIsGoneIsDropped) {
  Job job(2, "accrun.test", /*local=*/1);
  std::function<void(bool, std::string)> finish;
  job.ev.fence_router = [&](const std::string&, std::string,
                            std::function<void(bool, std::string)> done) {
    finish = std::move(done);
  };
  job.send(0, kInit1);
  EXPECT_TRUE(job.send(0, "cmd=barrier_in\n").empty());
  ASSERT_TRUE(finish);
  job.conns.clear();
  job.space.reset();
  finish(true, PmiJobSpace::encode({{"c", "2"}}));  // ASan: a heap-use-after-free before
  EXPECT_TRUE(job.out[0].empty());
}

// Across hosts: this host's puts leave in one blob with signature "pmi:*";
// what comes back from the router (every host's) is what gets see.
TEST(PmiFence, GoesThroughTheRouterWithItsOwnSignature) {
  Job job(4, "accrun.test", /*local=*/2);
  std::string signature, sent;
  std::function<void(bool, std::string)> finish;
  job.ev.fence_router = [&](const std::string& sig, std::string blob, std::function<void(bool, std::string)> done) {
    signature = sig;
    sent = std::move(blob);
    finish = std::move(done);
  };
  job.send(0, kInit1);
  job.send(1, kInit2);
  job.send(0, "cmd=put kvsname=accrun.test key=a value=0\n");
  job.send(1, v2("cmd=kvs-put;key=b;value=1;"));
  EXPECT_TRUE(job.send(0, "cmd=barrier_in\n").empty());
  EXPECT_FALSE(finish);  // rank 1 of this host is not there yet
  EXPECT_TRUE(job.send(1, v2("cmd=kvs-fence;")).empty());
  ASSERT_TRUE(finish);
  EXPECT_EQ(signature, kFenceSignature);
  std::map<std::string, std::string> mine;
  ASSERT_TRUE(PmiJobSpace::decode(sent, &mine));
  EXPECT_EQ(mine, (std::map<std::string, std::string>{{"a", "0"}, {"b", "1"}}));
  EXPECT_FALSE(job.space->get("a"));  // not before the fence completes
  finish(true, sent + PmiJobSpace::encode({{"c", "2"}}));
  EXPECT_EQ(job.take(0), "cmd=barrier_out\n");
  EXPECT_EQ(field(fields_of(job.take(1)), "rc"), "0");
  EXPECT_EQ(field(fields_of(job.send(0, "cmd=get kvsname=accrun.test key=c\n")), "value"), "2");
  EXPECT_EQ(field(fields_of(job.send(1, v2("cmd=kvs-get;key=a;"))), "value"), "0");
}

TEST(PmiFence, MalformedDataFromTheRouterFailsTheFence) {
  Job job(1);
  job.ev.fence_router = [&](const std::string&, std::string, std::function<void(bool, std::string)> done) {
    done(true, std::string{'\x05', '\0', '\0', '\0', 'a', 'b'});  // a 5-byte length, 2 bytes
  };
  job.send(0, kInit1);
  EXPECT_EQ(field(fields_of(job.send(0, "cmd=barrier_in\n")), "rc"), "-1");
}

// The job controller's part in fences across hosts, for hosts simulated
// here: a round completes once every host sent its part, and each host
// gets every host's parts back.
struct Rounds {
  struct Round {
    std::map<int, std::string> parts;
    std::map<int, std::function<void(bool, std::string)>> done;
  };
  int hosts;
  std::vector<Round> rounds;
  std::map<int, size_t> next;  // host -> its next round
  explicit Rounds(int n) : hosts(n) {}
  void attach(Job& job, int host) {
    job.ev.fence_router = [this, host](const std::string& sig, std::string blob,
                                       std::function<void(bool, std::string)> done) {
      EXPECT_EQ(sig, kFenceSignature);
      size_t k = next[host]++;
      if (rounds.size() <= k) rounds.resize(k + 1);
      rounds[k].parts[host] = std::move(blob);
      rounds[k].done[host] = std::move(done);
      if (static_cast<int>(rounds[k].parts.size()) < hosts) return;
      std::string all;
      for (auto& [h, part] : rounds[k].parts) all += part;
      auto answers = std::move(rounds[k].done);  // an answer may start the next round
      for (auto& [h, d] : answers) d(true, all);
    };
  }
};

// Two hosts: pmi-a with rank 0, pmi-b with the job's other ranks; every
// rank has sent init.
struct TwoHosts {
  Rounds rounds{2};
  Job a, b;
  explicit TwoHosts(int n) : a(n, "accrun.test", 1, "pmi-a"), b(n, "accrun.test", n - 1, "pmi-b") {
    rounds.attach(a, 0);
    rounds.attach(b, 1);
    a.send(0, kInit1);
    for (int r = 1; r < n; ++r) b.send(r, kInit1);
  }
};

// Across hosts: a rank that leaves on one host (here without finalize)
// fails the fence the other hosts' ranks wait in, naming it and its host,
// and every later fence there fails at once.  Before, the other hosts
// waited for that host's part until --timeout.
TEST(PmiFence, ARankThatLeftOnAnotherHostFailsTheFencesThere) {
  TwoHosts job(2);
  Rounds& job_rounds = job.rounds;
  Job& a = job.a;
  Job& b = job.b;
  b.space->poison(1, "closed its PMI connection without finalize");
  EXPECT_EQ(job_rounds.next[1], 1U);  // pmi-b sent its reason as its part of round 1
  EXPECT_TRUE(a.out[0].empty());
  Fields f = fields_of(a.send(0, "cmd=barrier_in\n"));
  EXPECT_EQ(field(f, "rc"), "-1");
  EXPECT_EQ(field(f, "msg"), "rank_1_on_host_pmi-b_closed_its_PMI_connection_without_finalize");
  f = fields_of(a.send(0, "cmd=barrier_in\n"));
  EXPECT_EQ(field(f, "rc"), "-1");
  EXPECT_EQ(job_rounds.next[0], 1U);  // failed here, without a round no other host would join
  EXPECT_EQ(job_rounds.next[1], 1U);  // pmi-b learnt nothing new: it sends nothing more
}

// A host whose rank fails while the host's part of a round is already
// with the router: that round completes for everyone, and the failure
// travels as the host's part of the next one, sent at once (the host's
// ranks may all be gone, and nobody left to send it, before the round's
// answer comes).
TEST(PmiFence, AFailureDuringARoundReachesTheOtherHostsInTheNext) {
  TwoHosts job(3);
  Rounds& job_rounds = job.rounds;
  Job& a = job.a;
  Job& b = job.b;
  b.send(1, "cmd=put kvsname=accrun.test key=k1 value=v1\n");
  EXPECT_TRUE(b.send(1, "cmd=barrier_in\n").empty());
  EXPECT_TRUE(b.send(2, "cmd=barrier_in\n").empty());
  ASSERT_EQ(job_rounds.next[1], 1U);  // pmi-b's part of round 1 is out
  EXPECT_TRUE(b.send(2, "cmd=abort exitcode=3\n").empty());
  EXPECT_EQ(job_rounds.next[1], 2U);  // its reason, as its part of round 2, at once
  EXPECT_EQ(a.send(0, "cmd=barrier_in\n"), "cmd=barrier_out\n");
  EXPECT_EQ(b.take(1), "cmd=barrier_out\n");
  EXPECT_EQ(field(fields_of(a.send(0, "cmd=get kvsname=accrun.test key=k1\n")), "value"), "v1");
  EXPECT_EQ(job_rounds.next[1], 2U);  // nothing more
  Fields f = fields_of(a.send(0, "cmd=barrier_in\n"));
  EXPECT_EQ(field(f, "rc"), "-1");
  EXPECT_EQ(field(f, "msg"), "rank_2_on_host_pmi-b_aborted");
}

}  // namespace
}  // namespace accrun::launcher::pmi
