import Testing
@testable import TestOrigin

@Suite struct ConformanceSmokeTests {
    @Test func moduleLinks() {
        #expect(String(describing: TestOriginModule.self) == "TestOriginModule")
    }
}
