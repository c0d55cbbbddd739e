@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Testing
import TestOrigin

@testable import downloadkit_fleet_bench

/// downloadkit-fleet-bench's exactly-once check (`ClaimTally`) on claims from a real store: a lease that ran
/// out and was taken over is a second claim of its task, and the check names it (the bench then exits
/// non-zero); so are a task nobody claimed and a completion the store refused.
@Suite(.timeLimit(.minutes(5)))
struct FleetBenchCheckTests {
    @Test func aTaskClaimedTwiceOrNeverFailsTheBenchsCheck() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            let added = try await store.add(
                (0..<3).map {
                    DownloadManager.TaskRequest(url: "http://127.0.0.1:9/check-\($0).bin", destination: .file("/tmp/check-\($0).bin"))
                },
                defaultDirectory: "/tmp")
            let ids = added.map(\.id)

            // Worker a's lease on the first task runs out; worker b takes it over (epoch 2) and the second task.
            let first = try await store.claim(worker: "a", count: 1, lease: .milliseconds(300))
            #expect(first.map(\.task.id) == [ids[0]])
            try await Task.sleep(for: .milliseconds(600))
            let second = try await store.claim(worker: "b", count: 2, lease: .seconds(60))
            #expect(second.map(\.task.id) == [ids[0], ids[1]])
            var claims: [ClaimTally.Claim] = []
            for (worker, leases) in [("a", first), ("b", second)] {
                for lease in leases {
                    let result = DownloadResult(
                        path: "/tmp/x", bytes: 0, resumedFrom: 0, bytesTransferred: 0, finalURL: lease.task.currentURL,
                        checksumHex: nil, isResumable: false)
                    let finished = try await store.finish(lease, worker: worker, as: .completed(result))
                    claims.append(ClaimTally.Claim(taskID: lease.task.id, epoch: lease.epoch, worker: worker, finished: finished))
                }
            }

            let problems = ClaimTally(queued: Set(ids), claims: claims).problems()
            #expect(problems.contains("1 tasks claimed more than once: \(ids[0]) by a (epoch 1), b (epoch 2)"), "\(problems)")
            #expect(problems.contains("1 queued tasks never claimed: \(ids[2])"), "\(problems)")
            #expect(problems.contains("1 claims under an epoch other than 1: \(ids[0]) epoch 2 (b)"), "\(problems)")
            // a's completion came after its lease was taken over: the store refused it.
            #expect(problems.contains("1 completions refused: \(ids[0]) (a)"), "\(problems)")
            #expect(problems.count == 4, "\(problems)")

            // Each task claimed once under epoch 1 and completed: the check passes.
            let sound = ids.map { ClaimTally.Claim(taskID: $0, epoch: 1, worker: "b", finished: true) }
            #expect(ClaimTally(queued: Set(ids), claims: sound).problems() == [])
            await store.close()
        }
    }
}
