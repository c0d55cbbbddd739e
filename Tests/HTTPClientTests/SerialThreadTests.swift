import DownloadKitRuntime
import Glibc
import Testing

/// `SerialThread`, the runtime layer's serial queue (the task store's writer, a daemon session's queue): jobs
/// run one at a time, in the order they were handed over, off the cooperative pool.
@Suite("Runtime layer: SerialThread", .timeLimit(.minutes(5)))
struct SerialThreadTests {
    /// Jobs handed over from many tasks at once never overlap, and each task's own jobs run in its order.
    @Test func jobsRunOneAtATimeInTheOrderTheyWereHandedOver() async {
        let queue = SerialThread()
        struct Log {
            var inside = 0
            var mostInside = 0
            var seen: [Int: [Int]] = [:]
        }
        let log = LockedValue(Log())
        await withTaskGroup(of: Void.self) { group in
            for sender in 0..<8 {
                group.addTask {
                    for index in 0..<2_000 {
                        queue.async {
                            log.withLock {
                                $0.inside += 1
                                $0.mostInside = max($0.mostInside, $0.inside)
                                $0.seen[sender, default: []].append(index)
                            }
                            log.withLock { $0.inside -= 1 }
                        }
                    }
                }
            }
        }
        await queue.settle()
        let result = log.withLock { $0 }
        #expect(result.mostInside == 1)
        for sender in 0..<8 {
            #expect(result.seen[sender] == Array(0..<2_000), "sender \(sender)")
        }
    }

    /// `run` waits for the jobs handed over before it, then returns what its body returns or throws what
    /// it throws.
    @Test func runComesAfterEarlierJobsAndReturnsOrThrows() async throws {
        let queue = SerialThread()
        let done = LockedValue(0)
        for _ in 0..<100 { queue.async { done.withLock { $0 += 1 } } }
        #expect(try await queue.run { done.withLock { $0 } } == 100)
        struct Refused: Error, Equatable {}
        await #expect(throws: Refused.self) { try await queue.run { () throws -> Int in throw Refused() } }
        queue.async { done.withLock { $0 += 1 } }
        await queue.settle()
        #expect(done.withLock { $0 } == 101)
    }

    /// `settleBlocking` (a transfer thread waiting for its background checkpoint) returns only after every job
    /// handed over before it has run, however long they take; on an idle queue it returns at once.
    @Test func settleBlockingWaitsForTheJobsBeforeIt() async throws {
        let queue = SerialThread()
        let ran = LockedValue([Int]())
        let seen = try await ThreadBridge.run { () -> [Int] in
            queue.settleBlocking()
            for index in 0..<3 {
                queue.async {
                    usleep(50_000)
                    ran.withLock { $0.append(index) }
                }
            }
            queue.settleBlocking()
            return ran.withLock { $0 }
        }
        #expect(seen == [0, 1, 2])
    }
}
