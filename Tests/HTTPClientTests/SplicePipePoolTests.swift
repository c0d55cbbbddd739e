import CDownloadKitSystem
import Glibc
@testable import HTTPClient
import Testing
import TestThreads

/// Issue #18: splice pipes are reused across transfers, and only empty ones are.
@Suite("Splice pipe pool", .offPool)
struct SplicePipePoolTests {
    private func makePipe(_ size: Int = 1 << 16) -> SplicePipePool.Pipe {
        var fds: [Int32] = [-1, -1]
        let capacity = dk_splice_pipe(&fds, Int32(size))
        #expect(capacity > 0)
        return (fds[0], fds[1], Int(capacity), size)
    }

    private func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFD) != -1 }

    @Test func anEmptyPipeIsKeptAndTakenAgainForTheSameSize() {
        let pool = SplicePipePool(capacity: 2)
        let pipe = makePipe()
        pool.giveBack(pipe)
        #expect(pool.keptCount == 1)
        #expect(pool.take(requested: 1 << 20) == nil)
        let taken = pool.take(requested: 1 << 16)
        #expect(taken?.read == pipe.read && taken?.write == pipe.write)
        #expect(pool.keptCount == 0)
        close(pipe.read)
        close(pipe.write)
    }

    @Test func aPipeWithBytesInItIsClosedNotKept() {
        let pool = SplicePipePool(capacity: 2)
        let pipe = makePipe()
        let bytes: [UInt8] = [1, 2, 3]
        #expect(write(pipe.write, bytes, 3) == 3)
        pool.giveBack(pipe)
        #expect(pool.keptCount == 0)  // (closed: other tests open descriptors meanwhile, so not checked by number)
    }

    @Test func pipesBeyondTheCapacityAreClosed() {
        let pool = SplicePipePool(capacity: 1)
        let first = makePipe()
        let second = makePipe()
        pool.giveBack(first)
        pool.giveBack(second)
        #expect(pool.keptCount == 1)
        #expect(isOpen(first.read))
        _ = pool.take(requested: 1 << 16)
        close(first.read)
        close(first.write)
    }

    @Test func aReceiveBufferGivesItsEmptyPipeBackAndTheNextOneTakesIt() throws {
        var first: SplicePipePool.Pipe?
        do {
            let buffer = ReceiveBuffer(capacity: 96 << 10)  // a size no other test's buffer asks for
            first = try buffer.splicePipe()
        }
        let buffer = ReceiveBuffer(capacity: 96 << 10)
        let second = try buffer.splicePipe()
        #expect(second.read == first?.read && second.write == first?.write)
        // A buffer that discards its pipe (a failure left bytes in it) gives nothing back.
        buffer.discardPipe()
        #expect(SplicePipePool.shared.take(requested: 96 << 10) == nil)
    }
}
