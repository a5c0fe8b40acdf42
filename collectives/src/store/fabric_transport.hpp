// The store's links between hosts over libfabric (host_links.hpp): one
// reliable-datagram endpoint (FI_EP_RDM) per member, tagged messages, on
// the provider libfabric chooses (FI_PROVIDER narrows it: verbs, efa, cxi
// on a cluster; tcp here).  Built with ACCRUN_WITH_LIBFABRIC.
//
// Set-up opens the endpoint and publishes its name as
// "fi.addr.<group rank>" through the group's Rendezvous; a peer's name is
// looked up on the first send to it.  Messages are matched by tag, which
// holds the sender's group rank and the message kind, so a receive needs no
// address and never sees another member's or another tag's messages:
//   header  kind 2*tag:   total length, head length, then the head and,
//                         for messages up to kInline bytes, the data
//   body    kind 2*tag+1: the data of a larger message, received straight
//                         into the caller's buffer where it is known
// Ordering between a sender's headers (and between its bodies) is
// libfabric's send-after-send order (FI_ORDER_SAS).
//
// Sends are buffered: a header always, and a body unless borrowed, is
// copied and posted, and its completion is reaped later; past
// pair_buffer_max bytes outstanding towards one peer a send waits.
// Credits (below) keep a sender from posting more than kCreditWindow of
// messages its receiver has not taken, which the provider would hold.  A
// borrowed body is sent from the caller's memory until flush_link.
// unborrow() closes the endpoint, which ends every transfer still reading
// the caller's memory (the group is unusable by then).
// Progress is manual: it happens inside this member's calls, and between
// them on the transport's progress thread (every 50 µs while sends are
// outstanding, every 2 ms otherwise; 10 times less often when ranks
// outnumber cores), so a peer's message or a
// transfer it pulls from us never waits for this member's next call.  One
// mutex covers the endpoint and the transport's state.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include <cstddef>
#include <cstdint>
#include <array>
#include <atomic>
#include <list>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "accrun/backend.hpp"
#include "store/host_links.hpp"

namespace accrun::collectives::store {

class FabricTransport final : public HostLinks {
 public:
  static constexpr std::size_t kInline = 8 * 1024;  // data carried in the header
  static constexpr std::size_t kCreditWindow = 4u << 20;
  static constexpr std::size_t kMessageCharge = 16 * 1024;
  static constexpr Tag kAckTag = static_cast<Tag>(2);  // credit reports (beside kP2p, kCollective)

  static Result<std::unique_ptr<FabricTransport>> create(const GroupContext& ctx, std::vector<bool> needs,
                                                         std::size_t pair_buffer_max);
  ~FabricTransport() override;

  const char* name() const override { return name_str_.c_str(); }
  Status send(int peer, Tag tag, const void* data, std::size_t len, const Wait& w) override;
  Status send2(int peer, Tag tag, const void* head, std::size_t head_len, const void* data, std::size_t len,
               const Wait& w, bool borrow = false) override;
  Status flush_link(int peer, const Wait& w) override;
  void unborrow() override;
  Status recv(int peer, Tag tag, void* data, std::size_t max_len, std::size_t* got, const Wait& w) override;
  Status recv_message(int peer, Tag tag, std::string* out, const Wait& w) override;
  Status recv_split(int peer, Tag tag, std::size_t keep, char* dest, std::size_t len, std::string* head,
                    bool* placed, const Wait& w) override;
  Status flush(const Wait& w) override;
  std::string describe(int peer) const override;

 private:
  // One posted operation: its context (libfabric's, FI_CONTEXT), what it
  // holds, and how it ended.
  struct Op {
    fi_context ctx;
    int peer = -1;
    bool is_send = false;
    bool borrowed = false;
    bool done = false;
    bool posted = false;      // a send waits in unposted_ until the provider takes it
    bool posted_recv = false; // a receive the provider holds
    std::uint64_t tag = 0;    // a send's, for posting later
    std::size_t charge = 0;   // a message's header: what it costs its receiver until taken (credits)
    bool is_ack = false;      // a receive of the peer's credits
    const void* buf = nullptr;
    std::size_t len = 0;
    int error = 0;            // a libfabric error (positive), once done
    std::size_t length = 0;   // received bytes, once done
    std::string own;          // a send's copy, a header's receive buffer
  };
  // A header received whose message has not been taken (its data did not
  // fit the caller's buffer): the next receive of that tag starts here.
  struct Header {
    std::uint64_t total = 0;
    std::uint32_t head_len = 0;
    std::string bytes;  // head, then inline data
  };

  FabricTransport(const GroupContext& ctx, std::vector<bool> needs, std::size_t pair_buffer_max);
  Status open(const GroupContext& ctx);
  Status address_of(int peer, const Wait& w, fi_addr_t* out);
  // charge: a message header's credits (0 for bodies and credit messages).
  Status post_send(int peer, std::uint64_t tag, const void* data, std::size_t len, std::string own, bool borrowed,
                   const Wait& w, std::size_t charge = 0);
  Status post_recv(int peer, std::uint64_t tag, void* data, std::size_t len, Op* op, const Wait& w);
  Status next_header(int peer, Tag tag, Header* out, const Wait& w);
  Status receive_body(int peer, Tag tag, char* dest, std::size_t len, const Wait& w);
  void progress();
  // Peer's link is lost, or the job reports its rank failed: nothing to
  // or from it will finish.
  bool gone(int peer) const;
  void post_unposted();
  // Posts the receive of peer's credit reports and requests (once per
  // peer, again after each).
  void post_ack_recv(int peer);
  // Sends peer a credit report (kind 0: what we took of tag) or request
  // (kind 1: we wait to send on tag); never waits.
  void post_credit(int peer, std::uint32_t kind, std::uint32_t tag, std::uint64_t value);
  // Reports what we took of tag from peer, if the report is due.
  void maybe_report(int peer, std::uint32_t tag);
  // Charged for a message of `total` bytes (its provider's buffer besides its bytes).
  static std::size_t charge_of(std::uint64_t total) { return static_cast<std::size_t>(total) + kMessageCharge; }
  template <class Ready>
  Status wait_for(Ready ready, int peer, const Wait& w, const char* what);
  std::uint64_t tag_of(int sender, Tag tag, bool body) const;
  // The Tag a libfabric tag of tag_of() carries.
  static std::uint32_t kind_of(std::uint64_t tag) { return static_cast<std::uint32_t>((tag & 0xff) >> 1); }
  std::string error_text(int err) const;
  void close_all();
  bool broken() const;
  std::unique_lock<std::mutex> enter();
  void progress_loop();

  std::string group_;
  std::string name_str_ = "libfabric";
  int rank_;
  std::vector<Member> members_;
  std::vector<bool> needs_;
  Rendezvous* rendezvous_;
  const PeerMonitor* peers_;
  std::size_t pair_buffer_max_;
  std::uint64_t memory_bytes_;  // the host's physical memory: no message past it is taken
  bool oversubscribed_;

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  bool closed_ = false;
  bool manual_progress_ = false;  // the provider moves data only inside our calls
  bool failed_ = false;           // the group failed (unborrow())

  std::vector<fi_addr_t> addr_;            // FI_ADDR_UNSPEC until looked up
  std::vector<std::size_t> outstanding_;   // copied bytes in flight, per peer
  // Credits, per peer and tag (kP2p, kCollective).  A provider holds the
  // messages that arrive before their receive is posted, without bound; so
  // a message goes out only while what this member sent the peer on that
  // tag and the peer has not taken stays within kCreditWindow (or nothing
  // is outstanding); later ones wait, copied, in unposted_ (and count
  // against pair_buffer_max as ever), behind it on that tag only.  The
  // receiver reports what it has taken (the sum of charges) on the ack tag
  // every quarter window, and at once when the sender, held back, asks.
  struct Credit {
    std::uint64_t charged = 0;  // sender: charges of the messages posted
    std::uint64_t acked = 0;    // sender: of those, what the peer reported taken
    bool asked = false;         // sender: asked for a report since the last one
    std::uint64_t taken = 0;    // receiver: charges of the messages taken
    std::uint64_t told = 0;     // receiver: what it last reported
    bool wanted = false;        // receiver: the sender asked and was not told since
  };
  std::vector<std::array<Credit, 2>> credit_;
  std::vector<Op*> ack_recv_;              // the posted receive of the peer's reports and requests
  std::vector<std::pair<int, std::uint32_t>> requests_;  // (peer, tag) that asked: answered by progress()
  std::vector<std::string> lost_;          // why a peer's link is gone
  std::list<Op> ops_;                      // posted, not yet reaped
  std::list<Op*> unposted_;                // sends the provider had no room for yet, in order
  std::map<std::pair<int, int>, Header> held_;  // (peer, tag): a header not taken
  // (peer, tag): header receives still posted after their call gave up;
  // the next receive of that tag waits on them first, in order.
  std::map<std::pair<int, int>, std::deque<Op*>> orphans_;
  bool close_pending_ = false;  // a body receive into a caller's buffer could not be taken back

  std::mutex mu_;                          // everything above, and the endpoint
  std::unique_lock<std::mutex>* lock_ = nullptr;  // the caller's, released while it sleeps
  std::atomic<bool> stop_{false};
  std::thread progress_thread_;
};

}  // namespace accrun::collectives::store
