// The store's transport between hosts: plain TCP (transport.hpp).
//
// Every member that needs it listens on an ephemeral port of every
// interface and publishes "tcp.addr.<group rank>" = "<port> <ip>,<ip>...
// <token>" through the group's Rendezvous.  The token is 16 random bytes;
// a connection must present the listener's token (which only readers of
// the job's directory know) or it is closed and logged.  Anyone who reaches
// the port may connect, so a connection that has not sent its whole hello
// within kHelloWaitMs is closed, and so is the oldest such connection when
// more than kMaxPending wait (a member sends its hello with its connect).
//
// Links are made lazily, one connection per direction: a member's first
// message to a peer connects to the peer's listener, and the peer accepts
// it during any of its own waits.  So the first collective between two
// hosts pays for the connection and the group's set-up costs nothing, and
// there is never a race over who connects.
//
// Messages are numbered on their link, and the receiver checks the numbers:
// a message lost or repeated fails the link.  A wait that times out says
// how far each direction of its link got, and whether the kernel's view of
// the connection (its descriptor, its byte counts) still agrees with the
// transport's.
//
// Messages carry a tag, so the hierarchical group's collectives (tag 1) and
// the program's sends (tag 0) share a link without mixing: a message read
// while waiting for the other tag is kept until asked for.  Sends are
// buffered: what the socket does not take at once is copied and written
// during later waits, so a send never waits for its receive, up to
// pair_buffer_max bytes queued towards one peer.  A receiver keeps at most
// as much again of one peer's messages that no call of its own asked for
// yet (reads()); past both, the sender's send waits.
//
// Receiving happens on the caller's thread, inside its waits (a spin of
// non-blocking looks until 200 µs pass without bytes from the awaited
// peer, or on an oversubscribed host looks and
// yields of the CPU by turns for 10 ms, then poll on every incoming
// socket); what a send could not hand to the kernel at once
// is written by the transport's writer thread.  A closed connection or a peer
// the job reports failed ends the waits that need it with kRemote naming
// the member; the group's deadline with kTimeout.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "accrun/accept_pause.hpp"
#include "accrun/backend.hpp"
#include "store/host_links.hpp"
#include "store/transport.hpp"

namespace accrun::collectives::store {

class TcpTransport final : public Transport, public HostLinks {
 public:
  // Listens and publishes this member's address.  `needs[q]` says whether
  // this member may talk to group rank q over TCP (the same answer on both
  // sides).  pair_buffer_max: see above.
  static Result<std::unique_ptr<TcpTransport>> create(const GroupContext& ctx, std::vector<bool> needs,
                                                      std::size_t pair_buffer_max);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  void leaving() override;
  using HostLinks::Tag;
  bool reaches(int peer) const override;
  Channel* channel(int peer) override;

  // Tagged messages, for the hierarchical group.
  Status send(int peer, Tag tag, const void* data, std::size_t len, const Wait& w) override;
  // borrow: what the socket does not take at once is not copied but sent
  // from `data` by the writer thread; the caller keeps `data` unchanged
  // until flush_link(peer) has returned.
  Status send2(int peer, Tag tag, const void* head, std::size_t head_len, const void* data, std::size_t len,
               const Wait& w, bool borrow = false) override;
  // Waits until everything queued towards peer has been handed to the kernel.
  Status flush_link(int peer, const Wait& w) override;
  // Copies whatever is still borrowed, so the caller's memory is free again
  // (a collective that fails before its flush).
  void unborrow() override;
  // Receives the next message of `tag` from peer; *got is its length.
  // kInvalidArgument (the message stays queued) when it exceeds max_len.
  Status recv(int peer, Tag tag, void* data, std::size_t max_len, std::size_t* got, const Wait& w) override;
  // Receives the next message of `tag` from peer, whole.
  Status recv_message(int peer, Tag tag, std::string* out, const Wait& w) override;
  // Receives the next message of `tag` from peer, expected to hold `keep`
  // bytes then `len`: the first go to *head and the rest straight into
  // `dest` as they arrive (*placed true).  A message of another length
  // lands whole in *head (*placed false).  `dest` is not written after
  // this returns.
  Status recv_split(int peer, Tag tag, std::size_t keep, char* dest, std::size_t len, std::string* head,
                    bool* placed, const Wait& w) override;
  // Posts a receive on every split's link first (a link holds one posted
  // receive), then waits for each in turn.
  Status recv_splits(std::vector<Split>* splits, const Wait& w) override;
  // Waits until everything queued has been handed to the kernel.
  Status flush(const Wait& w) override;
  std::string describe(int peer) const override;
  // What a timed-out wait on `peer` says of its link: messages each way, a
  // message half read, bytes still in the sockets.
  std::string link_state(int peer) override;
  // Bytes read from peer's connection that no receive has taken yet: whole
  // messages waiting, the one being read, and what is staged unparsed.
  std::size_t buffered(int peer) const;
  // How many looks (look(): a recv on the awaited link, every 16th a
  // poll of every socket) this member's waits took so far.
  std::uint64_t looks() const { return looks_; }
  // The bytes of messages read whole into the transport's own storage, no
  // receive posted for them while they came (each is copied again when it
  // is taken).
  std::uint64_t unasked() const { return unasked_; }
  // The lower rank of each pair connects, the higher waits for it: one
  // connection per pair, whoever sends first.
  Status pair_up(const std::vector<int>& peers, const Wait& w) override;

 private:
  struct Message {
    std::uint32_t tag;
    std::string bytes;    // the whole message, or its kept head when placed
    bool placed = false;  // the rest went to a posted receive's buffer
    std::size_t length = 0;  // the whole message's
  };
  struct Socket {
    unsigned long inode = 0;
    std::string ends;  // "local ip:port to peer ip:port"
    static Socket of(int fd);
  };
  // What link_state says of a descriptor that no longer names the
  // connection the link took it for (empty while it does).
  static std::string reused(int fd, const Socket& was);
  struct Link {
    std::string address;  // "port ip,ip token" as published; empty until looked up
    // One connection carries both ways where one side connected first:
    // the peer's (then out_fd == in_fd), or ours (in_ours: it may answer
    // on it).  Where both connected at the same moment, each direction
    // keeps its own connection.
    int out_fd = -1;       // our messages to the peer
    int in_fd = -1;        // its messages to us
    bool in_ours = false;  // in_fd is the connection we made
    // Which connection each descriptor named when the link took it (its
    // socket's inode and addresses), so a wait that times out can tell a
    // descriptor that something else in the process closed and reused.
    Socket in_sock, out_sock;
    // Bytes this transport read from in_fd and wrote to out_fd (the hello
    // included), held against the kernel's counts by link_state.
    std::uint64_t in_bytes = 0;
    std::uint64_t out_bytes = 0;  // (out_mu_)
    // The kernel's count of bytes to send on out_fd when the link took it
    // (the SYN of a connection this member made counts as one).
    std::uint64_t out_base = 0;   // (out_mu_)
    // Bytes the socket has not taken yet: copies, or (a borrowed send) the
    // caller's own memory, valid until it has flushed the link.
    struct Chunk {
      std::string own;
      const char* borrowed = nullptr;
      std::size_t borrowed_len = 0;
      const char* data() const { return borrowed != nullptr ? borrowed : own.data(); }
      std::size_t size() const { return borrowed != nullptr ? borrowed_len : own.size(); }
    };
    std::deque<Chunk> outq;
    std::size_t out_off = 0;       // of outq.front()
    std::size_t queued = 0;        // bytes in outq
    std::uint64_t out_msgs = 0;    // messages queued or sent to the peer (their numbers)
    // Reading: bytes from the socket land in `stage` (64 KiB, made on the
    // first read); [stage_at, stage_end) is what is not parsed yet.
    std::vector<char> stage;
    std::size_t stage_at = 0;
    std::size_t stage_end = 0;
    // Parsing: a header, then its body.
    unsigned char head[16];
    std::size_t head_got = 0;
    std::uint32_t in_tag = 0;
    std::string body;            // the frame's first body_keep bytes
    std::size_t body_got = 0;    // of body_total
    std::size_t body_total = 0;
    std::size_t body_keep = 0;
    char* direct = nullptr;      // where bytes past body_keep go (a posted receive)
    std::string spill;           // stands in for `direct` once its receive gave up
    bool in_body = false;
    std::uint64_t in_msgs = 0;   // frame headers read from the peer (the next one's number)
    struct Post {                // a receive waiting for its message
      bool active = false;
      bool matched = false;      // the frame being read is it
      std::uint32_t tag = 0;
      std::size_t keep = 0;
      char* dest = nullptr;
      std::size_t len = 0;
      bool up_to = false;        // a message of at most keep + len bytes fits (else exactly)
      bool done = false;         // it arrived whole: nothing more is read until the next receive
    } post;
    std::deque<Message> inbox;  // whole messages not yet asked for
    std::size_t inbox_bytes = 0;  // what inbox holds, each message as charge() counts it
    bool in_closed = false;     // the peer closed its connection to us
    std::string lost;           // why the link is gone, once it is (out_mu_)
    std::size_t dropped = 0;    // bytes queued for the peer when it went (out_mu_)
  };
  static constexpr std::size_t kStageBytes = 64 * 1024;
  // What a message in an inbox costs the receiver: its bytes and its entry.
  static std::size_t charge(const Message& m) { return m.bytes.size() + sizeof(Message); }
  // Whether the link's socket is read now: not once its posted receive has
  // its message (the rest is for later calls); without a posted receive,
  // not while its inbox holds pair_buffer_max bytes (a message begun is
  // read to its end), so the bytes a receiver keeps that it did not ask for
  // are bounded as a sender's queue is, and a sender past both waits.
  // Nor while a flush holds the links without a posted receive (holding_).
  bool reads(const Link& l) const {
    if (l.in_fd < 0 || l.in_closed) return false;
    if (l.post.active) return !l.post.done;
    if (holding_) return false;
    return l.in_body || l.inbox_bytes < pair_buffer_max_;
  }
  struct Pending {  // an accepted connection whose hello is not complete
    int fd;
    unsigned char hello[24];
    std::size_t got;
    Clock::time_point since;
  };
  static constexpr int kHelloWaitMs = 3000;
  static constexpr std::size_t kMaxPending = 256;
  static constexpr int kReportedRefusals = 10;
  class TaggedChannel;

  TcpTransport(const GroupContext& ctx, std::vector<bool> needs, std::size_t pair_buffer_max);
  Status listen_and_publish();
  Status connect_to(int peer, const Wait& w);
  Status enqueue(int peer, Tag tag, const void* head, std::size_t head_len, const void* data, std::size_t len,
                 const Wait& w, bool borrow);
  // One round of progress: accepts, reads and writes whatever is ready,
  // waiting up to timeout_ms for something to be.
  void progress(int timeout_ms);
  // One look between the turns of a short wait for `peer` (see the .cpp).
  void look(int peer);
  // Takes what a pending connection sent of its hello: false while it is
  // incomplete; true once it was taken as its member's connection or
  // refused (then closed).
  bool take_hello(Pending& p);
  // Accepts what the listener holds, taking each hello that is there.
  void accept_all();
  // Closes the pending connections past kHelloWaitMs, or past kMaxPending
  // (at the start of progress(), whose poll indexes pending_).
  void expire_pending();
  // Logs a refused connection: the first kReportedRefusals, then one line.
  void refused(const char* why);
  // The connection we made to `peer` was closed by it: true if the peer's
  // own connection to us is waiting (it connected while we did and sent
  // its messages there), which then carries its messages.
  bool adopt_pending(int peer);
  void read_link(int peer);
  // Ends the link over what its peer sent (a malformed frame, a message
  // this process cannot hold): what is staged is dropped and its socket is
  // no longer read, so no wait spins on bytes that can never be parsed.
  void refuse_input(int peer, const std::string& why);
  // Waits for the next message of `tag` from `peer`: its first `keep`
  // bytes to `head`, the rest straight into `dest` as it arrives when it
  // fits (`*placed`), else all of it to `head`.
  Status receive_posted(int peer, Tag tag, std::size_t keep, char* dest, std::size_t len, bool up_to,
                        std::string* head, bool* placed, std::size_t* length, const Wait& w);
  Status take_posted(int peer, Tag tag, std::string* head, bool* placed, std::size_t* length, const Wait& w);
  void unpost(int peer);
  void write_link_locked(int peer);
  void write_loop();
  void wake_writer();
  std::string lost(int peer);
  // kRemote when the link was lost with messages queued for the peer (they
  // were dropped): a send or flush that returned ok would hide that they
  // never left.
  Status unsent(int peer, const Wait& w);
  void lose(int peer, const std::string& why);
  void lose_locked(int peer, const std::string& why);
  // Waits for ready() with the group's deadline, watching `peer` (or no one
  // when peer < 0) for failure; with watch_all, every member (a
  // collective's data depends on all of them).
  template <class Ready>
  Status wait_for(Ready ready, int peer, const Wait& w, const char* what, bool watch_all = false);

  std::string name_;
  int rank_;
  std::vector<Member> members_;
  std::vector<bool> needs_;
  Rendezvous* rendezvous_;
  const PeerMonitor* peers_;
  std::size_t pair_buffer_max_;
  std::uint64_t memory_bytes_;  // the host's physical memory: no message past it is held
  std::string congestion_;  // of every connection ("system": the host's default)
  bool spin_ = true;        // waits look without blocking first (not on an oversubscribed host)
  // A flush's wait leaves in their sockets the messages nobody has posted a
  // receive for yet, until its own sends stop moving (flush_link).
  bool holding_ = false;
  class Holding;
  static constexpr std::chrono::milliseconds kHoldStill{20};
  std::uint64_t bytes_out() const;  // every link's out_bytes (takes out_mu_)
  int listen_fd_ = -1;
  unsigned char token_[16];
  std::vector<Link> links_;
  std::vector<Pending> pending_;  // oldest first
  int refusals_ = 0;
  // Whether progress() polls the listener (one whose connection cannot be
  // accepted stays readable).
  AcceptPause accept_pause_;
  std::vector<std::unique_ptr<TaggedChannel>> channels_;
  unsigned spin_turn_ = 0;  // wait_for's spins, across calls (the caller's thread)
  std::uint64_t looks_ = 0;       // look()'s calls (the caller's thread)
  std::uint64_t unasked_ = 0;     // unasked()'s bytes (the caller's thread)
  std::vector<pollfd> poll_fds_;  // progress()'s, kept between calls
  // The storage of messages taken so far that had come before their
  // receives were posted, for the next such messages (the caller's
  // thread): the largest, and up to kSpares more within kSpareBytes.
  // Allocated per message, a few MiB came from malloc as fresh pages each
  // time, written twice (zeroed, then read into), and a peer a call ahead
  // sends several such messages at once (a chain's broadcast: a chunk
  // each).  Kept until the group is destroyed.
  static constexpr std::size_t kSpares = 8, kSpareBytes = std::size_t{8} << 20;
  std::vector<std::string> spares_;  // largest first
  void recycle(std::string&& bytes);
  // Storage for a message's first `keep` bytes: a spare's where one holds
  // them (no byte written), else new.
  std::string storage(std::size_t keep);
  // A split's message that came whole: its data to dest, its storage to spares_.
  void place_split(std::string* head, bool* placed, char* dest, std::size_t keep, std::size_t len);
  std::vector<int> poll_who_;
  // The sending side of every link (out_fd, outq, out_off, queued, lost)
  // is shared with the writer thread under out_mu_; the receiving side is
  // the caller's alone.
  mutable std::mutex out_mu_;
  bool stop_ = false;
  int wake_fd_ = -1;
  std::thread writer_;
};

}  // namespace accrun::collectives::store
