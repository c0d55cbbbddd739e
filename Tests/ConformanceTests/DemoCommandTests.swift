import Foundation
import Testing
import TestOrigin

/// `downloadkit demo` end to end (README's main command): it serves with its own loopback origin
/// (not the test harness, issue #12), interrupts, resumes with a Range request and verifies.
@Suite(.timeLimit(.minutes(3)))
struct DemoCommandTests {
    @Test func demoInterruptsResumesAndVerifiesWithoutFetchingAByteTwice() async throws {
        let dir = try ScratchDirectory()
        let result = try await CLITests().run(
            ["demo", "--size", "8", "--rate", "8", "--interrupt-at", "0.3", "--directory", dir.path], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(result.output.contains("the server saw: Range: bytes="), "\(result.output)")
        #expect(result.output.contains("no byte fetched twice"), "\(result.output)")
        #expect(result.output.contains("4. verified: SHA-256"), "\(result.output)")
        #expect(dir.contents == ["demo.bin"])
        let size = try FileManager.default.attributesOfItem(atPath: dir.file("demo.bin"))[.size] as? Int64
        #expect(size == 8 << 20)
    }
}
