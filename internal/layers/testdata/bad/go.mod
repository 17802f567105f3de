module example.com/bad
