pytest_plugins = ["tests.kubeapi.fixtures", "tests.realk8s.fixtures", "tests.promfixtures"]
