import DownloadKit
import DownloadKitManager
import Foundation
import Testing
import TestThreads

@Suite("Manager scheduler", .offPool)
struct ManagerSchedulerTests {
    private func starts(_ actions: [Scheduler.Action]) -> [String] {
        actions.compactMap { if case .start(let id) = $0 { return id } else { return nil } }
    }

    @Test("seed 001: limit 5, restart 10 11 12 08 09, limit 2 requeues 12 08 09; when 10 ends 12 starts, not 08")
    func seed001Example() {
        var scheduler = Scheduler(maxConcurrent: 5)
        var started: [String] = []
        for id in ["08", "09", "10", "11", "12"] {
            started += starts(scheduler.resume(id, priority: 0).actions)
        }
        #expect(started == ["08", "09", "10", "11", "12"])
        for id in ["08", "09", "10", "11", "12"] { #expect(scheduler.withdraw(id).isEmpty) }
        #expect(scheduler.isIdle)

        var restarted: [String] = []
        for id in ["10", "11", "12", "08", "09"] {
            restarted += starts(scheduler.resume(id, priority: 0).actions)
        }
        #expect(restarted == ["10", "11", "12", "08", "09"])

        let lowered = scheduler.setMaxConcurrent(2)
        #expect(lowered == [.requeue("09"), .requeue("08"), .requeue("12")])
        #expect(scheduler.runningIDs == ["10", "11"])
        #expect(scheduler.waitingIDs == ["12", "08", "09"])

        #expect(scheduler.taskEnded("10") == [.start("12")])
        #expect(scheduler.taskEnded("11") == [.start("08")])
    }

    @Test("a freed slot goes to the highest priority, then to the earliest in line")
    func priorityThenOrder() {
        var scheduler = Scheduler(maxConcurrent: 1)
        #expect(starts(scheduler.resume("a", priority: 0).actions) == ["a"])
        _ = scheduler.resume("b", priority: 0)
        _ = scheduler.resume("c", priority: 5)
        _ = scheduler.resume("d", priority: 5)
        _ = scheduler.resume("e", priority: -1)
        #expect(scheduler.waitingIDs == ["c", "d", "b", "e"])
        #expect(scheduler.taskEnded("a") == [.start("c")])
        #expect(scheduler.setPriority("b", 9).isEmpty)
        #expect(scheduler.taskEnded("c") == [.start("b")])
        #expect(scheduler.taskEnded("b") == [.start("d")])
        #expect(scheduler.taskEnded("d") == [.start("e")])
        #expect(scheduler.taskEnded("e") == [.allFinished])
    }

    @Test("a resumed task joins the end of the line; enqueueing never interrupts a running task")
    func resumedTaskJoinsAtEnd() {
        var scheduler = Scheduler(maxConcurrent: 1)
        for id in ["a", "b", "c"] { _ = scheduler.resume(id, priority: 0) }
        #expect(scheduler.withdraw("b").isEmpty)
        _ = scheduler.resume("b", priority: 0)
        #expect(scheduler.waitingIDs == ["c", "b"])
        #expect(starts(scheduler.resume("urgent", priority: 100).actions).isEmpty)
        #expect(scheduler.runningIDs == ["a"])
        #expect(scheduler.waitingIDs == ["urgent", "c", "b"])
    }

    @Test("raising the limit starts waiting tasks in order; withdrawing never reports all-finished")
    func raiseLimit() {
        var scheduler = Scheduler(maxConcurrent: 1)
        for id in ["a", "b", "c", "d"] { _ = scheduler.resume(id, priority: 0) }
        #expect(scheduler.setMaxConcurrent(3) == [.start("b"), .start("c")])
        #expect(scheduler.withdraw("a") == [.start("d")])
        #expect(scheduler.withdraw("b").isEmpty)
        #expect(scheduler.withdraw("c").isEmpty)
        #expect(scheduler.withdraw("d").isEmpty)
        #expect(scheduler.isIdle)
    }

    @Test("move puts a waiting task exactly at a position, taking the displaced task's priority")
    func move() {
        var scheduler = Scheduler(maxConcurrent: 1)
        for id in ["run", "a", "b", "c", "d"] { _ = scheduler.resume(id, priority: 0) }
        _ = scheduler.setPriority("d", 3)
        #expect(scheduler.waitingIDs == ["d", "a", "b", "c"])
        let moved = scheduler.move("c", toPosition: 0)
        #expect(moved?.entry.priority == 3)
        #expect(scheduler.waitingIDs == ["c", "d", "a", "b"])
        _ = scheduler.move("c", toPosition: 2)
        #expect(scheduler.waitingIDs == ["d", "a", "c", "b"])
        _ = scheduler.move("d", toPosition: 99)
        #expect(scheduler.waitingIDs == ["a", "c", "b", "d"])
        #expect(scheduler.move("run", toPosition: 0) == nil)
        // Many moves into the same gap force a renumbering; the line stays as asked.
        for _ in 0..<40 {
            _ = scheduler.move("d", toPosition: 1)
            _ = scheduler.move("b", toPosition: 1)
        }
        #expect(scheduler.waitingIDs == ["a", "b", "d", "c"])
        #expect(scheduler.taskEnded("run") == [.start("a")])
    }

    @Test("restored entries keep their stored order")
    func restore() {
        var scheduler = Scheduler(maxConcurrent: 2)
        scheduler.restore(Scheduler.Entry(id: "late", priority: 0, order: 900))
        scheduler.restore(Scheduler.Entry(id: "early", priority: 0, order: 100))
        scheduler.restore(Scheduler.Entry(id: "mid", priority: 0, order: 500))
        #expect(scheduler.schedule() == [.start("early"), .start("mid")])
        let next = scheduler.resume("new", priority: 0)
        #expect(next.order > 900)
        #expect(scheduler.waitingIDs == ["late", "new"])
    }

    @Test("network: nothing runs while down; unmetered-only tasks wait on a metered network")
    func network() {
        var scheduler = Scheduler(maxConcurrent: 2)
        _ = scheduler.resume("wifiOnly", priority: 5, requiresUnmeteredNetwork: true)
        _ = scheduler.resume("any", priority: 0)
        _ = scheduler.resume("any2", priority: 0)
        #expect(scheduler.runningIDs == ["wifiOnly", "any"])
        let metered = scheduler.setNetwork(NetworkStatus(isReachable: true, isMetered: true))
        #expect(metered == [.holdForNetwork("wifiOnly"), .start("any2")])
        let down = scheduler.setNetwork(NetworkStatus(isReachable: false, isMetered: false))
        #expect(Set(down) == [.holdForNetwork("any"), .holdForNetwork("any2")])
        #expect(scheduler.runningIDs.isEmpty)
        #expect(!scheduler.isIdle)
        let up = scheduler.setNetwork(NetworkStatus(isReachable: true, isMetered: false))
        #expect(up == [.start("wifiOnly"), .start("any")])
        #expect(scheduler.setNetwork(NetworkStatus(isReachable: true, isMetered: true)) == [.holdForNetwork("wifiOnly"), .start("any2")])
        #expect(scheduler.setAllowsMeteredNetwork(false) == [.holdForNetwork("any"), .holdForNetwork("any2")])
    }

    @Test("10,000 tasks: every event stays cheap")
    func scale() {
        let count = 10_000
        var scheduler = Scheduler(maxConcurrent: 3)
        let clock = ContinuousClock()
        let enqueue = clock.measure {
            for index in 0..<count { _ = scheduler.resume("t\(index)", priority: index % 7) }
        }
        var order: [String] = []
        let drain = clock.measure {
            for id in scheduler.runningIDs.sorted() { order += starts(scheduler.taskEnded(id)) }
            while !scheduler.isIdle {
                let id = scheduler.runningIDs.min() ?? ""
                order += starts(scheduler.taskEnded(id))
            }
        }
        print("Scheduler scale: \(count) enqueues \(enqueue), \(count) ends \(drain)")
        #expect(scheduler.isIdle)
        // Speed is the benchmark's to show, never a timed assertion here.
    }
}
