import Foundation
import HTTPClient
import Testing
import TestOrigin

@testable import DownloadKit

/// The engine's waits end by a wake-up, not by polling: a stop request during a long retry delay or
/// rate-limit wait takes effect at once. No timed assertion: a wait that was not woken would last ten
/// minutes and trip the suite's time limit. The limit is five minutes, not one: it only has to be shorter
/// than the ten-minute waits, and a test's time counts from its start, including any time its tasks wait
/// for a thread of the cooperative pool (two on a 2-core machine) that other tests hold — under TSan that
/// wait reached 94 s in CI.
@Suite(.timeLimit(.minutes(5)))
struct WakeSignalTests {
    final class Flag: @unchecked Sendable {
        private let value = LockedValue(false)
        var isSet: Bool { value.withLock { $0 } }
        func set() { value.withLock { $0 = true } }
    }

    /// Runs `body` on its own thread (never on the cooperative pool) and awaits its result.
    func onThread(_ body: @escaping @Sendable () -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: body()) }.start()
        }
    }

    @Test func aStopWakesATenMinuteWait() async {
        let wakes = WakeSignal()
        let stop = Flag()
        // The wait's first question says it has begun: awaited, not spun for on a pool thread.
        let (started, starting) = AsyncStream<Void>.makeStream()
        let waiter = Task {
            await onThread {
                interruptibleSleep(600, wakes: wakes, shouldStop: {
                    starting.yield()
                    return stop.isSet
                })
            }
        }
        var begun = started.makeAsyncIterator()
        _ = await begun.next()
        stop.set()
        wakes.wake()
        #expect(await waiter.value == false)
    }

    /// No polling: a wait nobody wakes asks `shouldStop` exactly twice, before sleeping and at its deadline
    /// (the 50 ms slices it replaced asked six times in 0.3 s).
    @Test func aWaitNobodyWakesChecksOnlyAtItsStartAndItsEnd() async {
        let wakes = WakeSignal()
        let checks = LockedValue(0)
        let completed = await onThread {
            interruptibleSleep(0.3, wakes: wakes, shouldStop: {
                checks.withLock { $0 += 1 }
                return false
            })
        }
        #expect(completed)
        #expect(checks.withLock { $0 } == 2)
    }

    @Test func aPauseEndsATenMinuteRetryAfterWait() async throws {
        // A server that always answers 503 with Retry-After: 600: the pause ends the ten-minute wait.
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/busy", .response(status: 503, headers: [("Retry-After", "600")], body: Array("busy".utf8)))
        let dir = try ScratchDirectory()
        let download = Download(
            DownloadRequest(url: origin.url("/busy"), destination: .file(dir.file("f"))), configuration: testConfiguration(retries: 3))
        download.start()
        for await event in download.events {
            if case .stateChanged(.retrying, _) = event { break }
        }
        _ = await download.pause()
        do {
            _ = try await download.result()
            Issue.record("a paused download finished")
        } catch {
            #expect(error.code == .paused, "\(error)")
        }
    }
}
