/// The exactly-once check of a claims run: which tasks were queued, and every claim the workers got.
///
/// A run passes only when each queued task was claimed exactly once, under epoch 1 (its first lease), and
/// each claim's completion was accepted; anything else is a ``problems`` line and fails the bench.
struct ClaimTally: Sendable {
    /// One lease a worker got.
    struct Claim: Sendable, Hashable {
        var taskID: String
        var epoch: Int64
        var worker: String
        /// Whether `finish(.completed)` was accepted under this lease.
        var finished: Bool
    }

    var queued: Set<String>
    var claims: [Claim]

    /// Everything that breaks "every task claimed exactly once" (empty when the run is sound), the first
    /// `limit` of each kind with their count.
    func problems(limit: Int = 5) -> [String] {
        var byTask: [String: [Claim]] = [:]
        for claim in claims { byTask[claim.taskID, default: []].append(claim) }
        var lines: [String] = []
        func report(_ what: String, _ items: [String]) {
            guard !items.isEmpty else { return }
            let shown = items.sorted().prefix(limit).joined(separator: "; ")
            lines.append("\(items.count) \(what): \(shown)\(items.count > limit ? "; …" : "")")
        }
        report(
            "tasks claimed more than once",
            byTask.filter { $0.value.count > 1 }.map { id, claims in
                "\(id) by " + claims.map { "\($0.worker) (epoch \($0.epoch))" }.joined(separator: ", ")
            })
        report("queued tasks never claimed", queued.subtracting(byTask.keys).map { $0 })
        report("claimed tasks that were not queued", Set(byTask.keys).subtracting(queued).map { $0 })
        report(
            "claims under an epoch other than 1",
            claims.filter { $0.epoch != 1 }.map { "\($0.taskID) epoch \($0.epoch) (\($0.worker))" })
        report("completions refused", claims.filter { !$0.finished }.map { "\($0.taskID) (\($0.worker))" })
        return lines
    }
}
