import Foundation
import Testing
import TestThreads

/// The calling thread's kernel name (`/proc/thread-self/comm`): what `ps -L` and gdb show.
private func threadName() -> String {
    ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .newlines)
}

private func childIsOffPool() async -> Bool { OffPoolThreads.isCurrent }

/// `.offPool` puts a suite's test cases on the tests' own threads (docs/TESTING.md), and only those.
@Suite(.offPool)
struct OffPoolTests {
    @Test func aSynchronousTestRunsOnTheTestsOwnThreads() {
        #expect(OffPoolThreads.isCurrent, "\(threadName())")
        #expect(threadName().hasPrefix("test-thread-"), "\(threadName())")
    }

    @Test(arguments: [1, 2])
    func everyCaseOfAParameterisedTestToo(_ index: Int) {
        #expect(OffPoolThreads.isCurrent, "case \(index): \(threadName())")
    }

    @Test func anAsyncTestAndItsStructuredChildrenToo() async {
        async let child = childIsOffPool()
        #expect(OffPoolThreads.isCurrent, "\(threadName())")
        #expect(await child)
    }

    @Test func anUnstructuredTaskGoesBackToThePool() async {
        #expect(await Task { OffPoolThreads.isCurrent }.value == false)
    }
}

@Suite struct WithoutOffPoolTests {
    @Test func aTestWithoutTheTraitRunsOnThePool() {
        #expect(!OffPoolThreads.isCurrent, "\(threadName())")
    }
}
