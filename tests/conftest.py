pytest_plugins = ["tests.kubeapi.fixtures", "tests.promfixtures"]
